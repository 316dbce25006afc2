# expect: q1=full q2=full q3=full
# why: both tables measured in the notebook with tk.trace by helper functions (defaultdict), not typed; Sigmoid saves the output of torch.sigmoid

# %%
import torch

import tracekit as tk

# %%
from collections import defaultdict


def _saved_slots(y):
    return {r.slot for r in tk.trace(y).residuals}


def _binary_table():
    table = defaultdict(set)
    fns = {"mul": torch.mul, "div": torch.div, "mm": torch.mm, "sub": torch.sub}
    for op, fn in fns.items():
        for who in ["a", "b", "ab"]:
            shape_a, shape_b = ((2, 3), (3, 4)) if op == "mm" else ((5,), (5,))
            a = torch.rand(shape_a).add(0.5).requires_grad_("a" in who)
            b = torch.rand(shape_b).add(0.5).requires_grad_("b" in who)
            table[f"{op}:{who}"] |= _saved_slots(fn(a, b))
    return table


q1_slots = _binary_table()

# %%
def _unary_table():
    out = defaultdict(set)
    for op in ["exp", "tanh", "sigmoid", "sin", "cos", "log", "sqrt", "relu", "abs", "reciprocal", "expm1",
               "log1p", "rsqrt", "erf", "atan", "neg"]:
        x = torch.rand(5).add(0.5).requires_grad_()
        out[op] |= _saved_slots(getattr(torch, op)(x))
    return out


q2_slots = _unary_table()

# %%
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.sigmoid(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)

# %%
tk.check("ex01")
