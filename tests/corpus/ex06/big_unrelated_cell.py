# expect: q1=less
# why: right answer, but another cell keeps 384 MiB alive (the prompt says to keep other cells small: it runs inside the measurement)
# %%
import torch

import tracekit as tk

# %%
cache = torch.ones(96 * 1024 * 1024, dtype=torch.float32)  # 384 MiB kept for 'later'

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
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
