# expect: q1=full
# why: the diagnostic in a helper decorated with @torch.no_grad(), returned as a 0-dim tensor
# %%
import torch

import tracekit as tk

# %%
@torch.no_grad()
def diagnostic(model, x_val):
    return model(x_val).pow(2).mean()


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        history.append(diagnostic(model, x_val))
    return history

# %%
tk.check("ex06")
