# expect: q1=full q2=less q3=less
# why: tanh saves its input and recomputes tanh in backward; sin saves cos(x) computed in forward: right gradients, other residuals
# %%
import torch

import tracekit as tk

# %%
def div_forward(a, b):
    return a / b, (a, b)


def div_backward(saved, grad):
    a, b = saved
    return grad / b, -grad * a / (b * b)


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    return torch.tanh(x), (x,)


def tanh_backward(saved, grad):
    return grad * (1 - torch.tanh(saved[0]) ** 2)


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    return torch.sin(x), (torch.cos(x),)


def sin_backward(saved, grad):
    return grad * saved[0]


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
