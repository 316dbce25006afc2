# expect: q1=less
# why: keeps every step's val tensor (with its graph) in the list and converts only at return with torch.stack(history).detach().tolist(): the values are right floats and nothing is left after return, but during the run all 24 graphs are alive (~24 x 15 MiB, over the 160 MiB allowance), so the peak grows with the steps
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
    return torch.stack(history).detach().tolist()  # convert once, at the end

# %%
tk.check("ex06")
