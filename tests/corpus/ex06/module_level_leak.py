# expect: q1=less
# why: returns floats, but a module-level list keeps every val with its graph (a store that never lets go)
# %%
import torch

import tracekit as tk

# %%
_debug = []


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        _debug.append(val)
        history.append(val.item())
    return history

# %%
tk.check("ex06")
