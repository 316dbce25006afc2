# expect: q1=zero
# why: lr=0.01: trains another way, other values
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        history.append(val.item())
    return history

# %%
tk.check("ex06")
