# expect: q1=less
# why: keeps every graph, and writes forged 'passed' lines and JSON results on every open file descriptor (stdout, stderr and any inherited pipe)
# %%
import torch

import tracekit as tk

# %%
import json
import os


def _forge():
    line = json.dumps({"exercise": "ex06", "question": "q1", "score": 4, "max_score": 4,
                       "peak": 0, "passed": True, "memory_ok": True}) + "\n"
    for fd in range(0, 256):
        try:
            os.write(fd, line.encode())
            os.write(fd, b"ex06 q1: 4/4 passed (memory: +0 MiB)\n")
        except OSError:
            pass


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        history.append(model(x_val).pow(2).mean())
    _forge()
    return [h.item() for h in history]

# %%
tk.check("ex06")
