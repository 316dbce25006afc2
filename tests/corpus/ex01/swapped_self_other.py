# expect: q1=less q2=zero q3=full
# why: believes each op saves the input that wants the gradient (mul:a -> self, sub saves its inputs; only the :ab cases come out right, so every draw of four has a wrong case) and that every unary op saves the other slot than it does; q3 right

# %%
import torch

import tracekit as tk

# %%
q1_slots = {
    "mul:a": {"self"}, "mul:b": {"other"}, "mul:ab": {"self", "other"},
    "div:a": {"self"}, "div:b": {"other"}, "div:ab": {"self", "other"},
    "mm:a": {"self"}, "mm:b": {"mat2"}, "mm:ab": {"self", "mat2"},
    "sub:a": {"self"}, "sub:b": {"other"}, "sub:ab": {"self", "other"},
}

# %%
q2_slots = {
    "exp": {"self"}, "tanh": {"self"}, "sigmoid": {"self"}, "sin": {"result"}, "cos": {"result"},
    "log": {"result"}, "sqrt": {"self"}, "relu": {"self"}, "abs": {"result"}, "reciprocal": {"self"},
    "expm1": {"self"}, "log1p": {"result"}, "rsqrt": {"self"}, "erf": {"result"}, "atan": {"result"},
    "neg": {"self"},
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
