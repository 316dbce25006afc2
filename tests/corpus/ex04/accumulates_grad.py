# expect: q1=full q2=less
# why: backward twice into x.grad without clearing it: the second call (and the first, which reads g+h) is wrong
# %%
import torch

import tracekit as tk

# %%
q1_needs = {
    "R1": {"MulBackward0.other"},
    "R2": set(),
    "R3": {"MulBackward0.other"},
    "R4": {"MulBackward0.self"},
    "R5": {"ExpBackward0.result"},
    "R6": {"PowBackward0.self"},
    "R7": {"MmBackward0.mat2"},
    "R8": {"ReluBackward0.result"},
    "R9": set(),
    "R10": {"TanhBackward0.result", "ExpBackward0.result", "MulBackward0.self", "MulBackward0.other"},
}

# %%
def second_derivative(f, x):
    f(x).sum().backward(create_graph=True)
    x.grad.sum().backward()
    return x.grad.detach().clone()

# %%
tk.check("ex04")
