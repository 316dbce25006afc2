# expect: q1=zero
# why: the untouched student notebook: tensors with history, one graph kept per step
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
        val = model(x_val).pow(2).mean()  # a diagnostic, never backwarded
        history.append(val)  # this keeps every step's diagnostic graph alive: fix it
    return history

# %%
tk.check("ex06")
