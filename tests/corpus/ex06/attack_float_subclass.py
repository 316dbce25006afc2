# expect: q1=less
# why: each logged value is a float subclass that secretly holds val (and its graph): looks like a Python float, keeps every graph
# %%
import torch

import tracekit as tk

# %%
class Number(float):
    pass


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        n = Number(val.item())
        n.keep = val
        history.append(n)
    return history

# %%
tk.check("ex06")
