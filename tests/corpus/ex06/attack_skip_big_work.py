# expect: q1=less
# why: for a big run it skips the work (no training, zeros logged) so the memory looks tiny; small runs are right
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    if x_val.shape[0] >= 4096:
        return [0.0] * steps
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        with torch.no_grad():
            history.append(model(x_val).pow(2).mean().item())
    return history

# %%
tk.check("ex06")
