# expect: q1=full q2=zero
# why: hard-codes the second derivative of sin (the lesson's kind of example) instead of differentiating f
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
    return -torch.sin(x.detach())

# %%
tk.check("ex04")
