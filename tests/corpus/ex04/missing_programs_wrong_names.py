# expect: q1=less q2=zero
# why: q1 has only R1-R5 and names without the Backward0 suffix; q2 forgets create_graph so the second grad raises
# %%
import torch

import tracekit as tk

# %%
q1_needs = {"R1": {"Mul.other"}, "R2": set(), "R3": {"Mul.other"}, "R4": {"Mul.self"}, "R5": {"Exp.result"}}

# %%
def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x).sum(), x)
    (h,) = torch.autograd.grad(g.sum(), x)
    return h

# %%
tk.check("ex04")
