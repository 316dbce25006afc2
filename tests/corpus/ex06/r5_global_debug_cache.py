# expect: q1=less
# why: returns right .item() floats but also appends each val tensor to a module-level _DEBUG_CACHE 'for later plots': every diagnostic graph outlives train (24 x ~15 MiB on the graded run, over the 160 MiB allowance, and it keeps growing across calls)
# %%
import torch

import tracekit as tk

# %%
_DEBUG_CACHE = []  # diagnostics kept for plotting after training


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        _DEBUG_CACHE.append(val)
        history.append(val.item())
    return history

# %%
tk.check("ex06")
