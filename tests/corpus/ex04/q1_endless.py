# expect: q1=zero q2=full
# why: q1's cell loops forever (intended, exempt from the run check: the grader's cell timer must interrupt it); q2 still counts
# %%
import torch

import tracekit as tk

# %%
_n = 0
while True:
    _n += 1
q1_needs = {"R1": {"MulBackward0.other"}}

# %%
def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    return h

# %%
tk.check("ex04")
