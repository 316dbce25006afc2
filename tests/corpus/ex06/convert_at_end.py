# expect: q1=less
# why: keeps every val with its graph during the loop and converts to floats only at the end: right values, peak grows with the steps
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        history.append(val)
    return [v.item() for v in history]

# %%
tk.check("ex06")
