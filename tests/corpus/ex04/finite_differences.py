# expect: q1=full q2=zero
# why: central second difference of f's values: imprecise, and wrong for a custom Function whose backward is not its slope
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
    h = 1e-3
    with torch.no_grad():
        return (f(x + h) - 2 * f(x) + f(x - h)) / (h * h)

# %%
tk.check("ex04")
