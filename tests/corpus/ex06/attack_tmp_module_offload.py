# expect: q1=less
# why: a helper module written to /tmp and imported packs each diagnostic graph's saved tensors into files on /tmp (tmpfs) so the process looks small; the graphs are kept for ever
# %%
import torch

import tracekit as tk

# %%
import os
import sys

_src = """
import os, uuid, torch
DIR = '/tmp/.ex06_store'
os.makedirs(DIR, exist_ok=True)
KEPT = []
def pack(t):
    path = os.path.join(DIR, uuid.uuid4().hex)
    torch.save(t.detach().clone(), path)
    return path
def unpack(path):
    return torch.load(path)
"""
with open("/tmp/ex06_offload.py", "w") as fh:
    fh.write(_src)
sys.path.insert(0, "/tmp")
import ex06_offload  # noqa: E402


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        with torch.autograd.graph.saved_tensors_hooks(ex06_offload.pack, ex06_offload.unpack):
            val = model(x_val).pow(2).mean()
        ex06_offload.KEPT.append(val)
        history.append(val.item())
    return history

# %%
tk.check("ex06")
