# expect: q1=zero q2=full
# why: q1's cell raises (a KeyError while building the dict; intended raise, exempt from the run check); q2 still counts
# %%
import torch

import tracekit as tk

# %%
_base = {"R1": {"MulBackward0.other"}}
q1_needs = {k: _base[k] for k in ["R1", "R2"]}

# %%
def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    return h

# %%
tk.check("ex04")
