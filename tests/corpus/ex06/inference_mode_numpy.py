# expect: q1=full
# why: diagnostic under torch.inference_mode(), logged as numpy.float64 (a float subclass), numpy imported at first use
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    import numpy as np

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        with torch.inference_mode():
            history.append(np.float64(model(x_val).pow(2).mean().item()))
    return history

# %%
tk.check("ex06")
