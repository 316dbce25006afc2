# expect: q1=less q2=less q3=full
# why: wrong slot names: mm's second operand called 'other' (PyTorch says mat2); relu and sqrt answered 'self', abs 'result'; other cases right

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
    "mm:a": {"other"},
    "mm:b": {"self"},
    "mm:ab": {"self", "other"},
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
    "sqrt": {"self"},
    "relu": {"self"},
    "abs": {"result"},
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
        s = torch.sigmoid(x)  # recompute σ from the saved input
        return grad * s * (1 - s)

# %%
tk.check("ex01")
