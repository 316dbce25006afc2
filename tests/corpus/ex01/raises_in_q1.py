# expect: q1=zero q2=full q3=full
# why: q1's cell raises (indexes a key it never set) before assigning q1_slots; q2 and q3 are right (the cell raising is intended)

# %%
import torch

import tracekit as tk

# %%
rules = {"mul": {"other", "self"}, "div": {"self", "other"}}
q1_slots = {f"{op}:ab": rules[op] for op in ["mul", "div", "mm", "sub"]}

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
