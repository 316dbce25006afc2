# expect: q1=full q2=full q3=full
# why: saved given as lists rather than tuples
# ambiguous: 'saved a tuple of the tensors' - a list of the same tensors
# %%
import torch

import tracekit as tk

# %%
def div_forward(a, b):
    return a / b, [a, b]


def div_backward(saved, grad):
    a, b = saved
    return grad / b, -grad * a / (b * b)


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    y = torch.tanh(x)
    return y, [y]


def tanh_backward(saved, grad):
    (y,) = saved
    return grad * (1 - y * y)


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    return torch.sin(x), [x]


def sin_backward(saved, grad):
    (x,) = saved
    return grad * torch.cos(x)


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
