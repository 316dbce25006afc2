# expect: q1=less
# why: keeps every graph during the loop, then deletes them and runs gc just before returning floats: the peak still grew with the steps
# %%
import torch

import tracekit as tk

# %%
import gc


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        kept.append(model(x_val).pow(2).mean())
    history = [v.item() for v in kept]
    kept.clear()
    gc.collect()
    return history

# %%
tk.check("ex06")
