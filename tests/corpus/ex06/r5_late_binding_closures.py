# expect: q1=less
# why: logs a lazy closure per step (lambda: val.item()) and evaluates them at return; Python closures bind the variable, not the value, so every entry is the LAST step's diagnostic (memory stays flat - only the last graph is held - but the values are wrong for every step but the last)
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loggers = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        loggers.append(lambda: val.item())  # format lazily, like a logger would
    return [read() for read in loggers]

# %%
tk.check("ex06")
