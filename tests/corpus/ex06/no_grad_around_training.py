# expect: q1=zero
# why: wraps the whole loop in no_grad: backward raises (no graph), nothing trains
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    with torch.no_grad():
        for _ in range(steps):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            history.append(model(x_val).pow(2).mean().item())
    return history

# %%
tk.check("ex06")
