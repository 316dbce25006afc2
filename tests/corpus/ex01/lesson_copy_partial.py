# expect: q1=less q2=less q3=less
# why: copied only the lesson's examples (mul:ab, mul:a, exp, sigmoid) and left the other cases out; Sigmoid saves both x and y (forbidden)

# %%
import torch

import tracekit as tk

# %%
q1_slots = {"mul:ab": {"self", "other"}, "mul:a": {"other"}}

# %%
q2_slots = {"exp": {"result"}, "sigmoid": {"result"}}

# %%
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y * (1 - y)

# %%
tk.check("ex01")
