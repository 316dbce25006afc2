# expect: q1=full
# why: values collected detached and returned as one 1-D tensor without history (a container of numbers per step)
# ambiguous: 'one number per step' - a single 1-D tensor of steps numbers vs a list of numbers
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
        history.append(val.detach().clone())
    return torch.stack(history)

# %%
tk.check("ex06")
