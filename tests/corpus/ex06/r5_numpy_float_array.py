# expect: q1=full
# why: reads each diagnostic with .item() as soon as it is computed and writes it into a preallocated numpy float64 array, which train returns; nothing keeps a graph, training unchanged
# ambiguous: 'one number per step: a Python float, or a tensor without history' - a numpy array of float64 (each element a numpy.float64, a float subclass) is returned instead of a list
# %%
import torch

import tracekit as tk

# %%
import numpy as np


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = np.empty(steps, dtype=np.float64)
    for i in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        history[i] = model(x_val).pow(2).mean().item()  # a float right away: the graph dies here
    return history

# %%
tk.check("ex06")
