# expect: q1=zero
# why: logs the diagnostic before the step instead of after it: values shifted by one step
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        with torch.no_grad():
            history.append(model(x_val).pow(2).mean().item())
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return history

# %%
tk.check("ex06")
