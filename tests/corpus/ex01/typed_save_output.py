# expect: q1=full q2=full q3=full
# why: every case typed as a set literal; Sigmoid saves its output y = 1/(1+exp(-x)) and reuses it

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
        y = 1 / (1 + torch.exp(-x))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)

# %%
tk.check("ex01")
