# expect: q1=less
# why: keeps every step's diagnostic tensor in a dict keyed by step number and calls .item() only when building the returned list: right floats, but all 24 diagnostic graphs stay alive until train returns (peak ~24 x 15 MiB above the reference, over the 160 MiB allowance)
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    by_step = {}
    for step in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        by_step[step] = model(x_val).pow(2).mean()
    return [by_step[step].item() for step in sorted(by_step)]

# %%
tk.check("ex06")
