# expect: q1=full q2=full q3=less
# why: Sigmoid saves x but backward uses a central finite difference of σ instead of σ(x)(1-σ(x)): approximate (fails tight float32/float64 tolerances), not the asked formula

# %%
import torch

import tracekit as tk

# %%
q1_slots = {
    "mul:a": {"other"},
    "mul:b": {"self"},
    "mul:ab": {"self", "other"},
    "div:a": {"other"},
    "div:b": {"self", "other"},
    "div:ab": {"self", "other"},
    "mm:a": {"mat2"},
    "mm:b": {"self"},
    "mm:ab": {"self", "mat2"},
    "sub:a": set(),
    "sub:b": set(),
    "sub:ab": set(),
}

# %%
q2_slots = {
    "exp": {"result"},
    "tanh": {"result"},
    "sigmoid": {"result"},
    "sin": {"self"},
    "cos": {"self"},
    "log": {"self"},
    "sqrt": {"result"},
    "relu": {"result"},
    "abs": {"self"},
    "reciprocal": {"result"},
    "expm1": {"result"},
    "log1p": {"self"},
    "rsqrt": {"result"},
    "erf": {"self"},
    "atan": {"self"},
    "neg": set(),
}

# %%
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        eps = 1e-2
        return grad * (torch.sigmoid(x + eps) - torch.sigmoid(x - eps)) / (2 * eps)

# %%
tk.check("ex01")
