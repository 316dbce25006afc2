# expect: q1=full q2=full q3=less
# why: Sigmoid keeps the output in a module-level cache instead of ctx: with two graphs alive the second forward overwrites the first's value, so the first graph's gradient is wrong

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
_LAST = {}


class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        _LAST["y"] = y
        return y

    @staticmethod
    def backward(ctx, grad):
        y = _LAST["y"]
        return grad * y * (1 - y)

# %%
tk.check("ex01")
