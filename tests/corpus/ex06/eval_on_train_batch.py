# expect: q1=zero
# why: logs the diagnostic on x instead of x_val
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
        val = model(x).pow(2).mean()
        history.append(val.item())
    return history

# %%
tk.check("ex06")
