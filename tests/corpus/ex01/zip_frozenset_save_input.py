# expect: q1=full q2=full q3=full
# why: tables built with dict(zip(...)) of frozensets; Sigmoid saves the input x and recomputes σ in backward

# %%
import torch

import tracekit as tk

# %%
cases = ["mul:a", "mul:b", "mul:ab", "div:a", "div:b", "div:ab", "mm:a", "mm:b", "mm:ab", "sub:a", "sub:b", "sub:ab"]
slots = [
    frozenset({"other"}), frozenset({"self"}), frozenset({"self", "other"}),
    frozenset({"other"}), frozenset({"self", "other"}), frozenset({"self", "other"}),
    frozenset({"mat2"}), frozenset({"self"}), frozenset({"self", "mat2"}),
    frozenset(), frozenset(), frozenset(),
]
q1_slots = dict(zip(cases, slots))

# %%
ops = ["exp", "tanh", "sigmoid", "sin", "cos", "log", "sqrt", "relu", "abs", "reciprocal", "expm1", "log1p",
       "rsqrt", "erf", "atan", "neg"]
saves = ["result", "result", "result", "self", "self", "self", "result", "result", "self", "result", "result",
         "self", "result", "self", "self", None]
q2_slots = dict(zip(ops, (frozenset() if s is None else frozenset([s]) for s in saves)))

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
