# expect: q1=full
# why: module-level WeakKeyDictionary counting runs per model; a generator of floats consumed into a tuple
# %%
import torch

import tracekit as tk

# %%
import weakref

_runs_per_model = weakref.WeakKeyDictionary()


def _steps(model, opt, x, x_val, steps):
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        with torch.no_grad():
            yield model(x_val).pow(2).mean().item()


def train(model, x, x_val, steps):
    _runs_per_model[model] = _runs_per_model.get(model, 0) + 1
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return tuple(_steps(model, opt, x, x_val, steps))

# %%
tk.check("ex06")
