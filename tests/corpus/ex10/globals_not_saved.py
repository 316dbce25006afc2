# expect: q1=less q2=less q3=full
# why: div and tanh backwards read the last forward's values from module globals instead of saved (two forwards run before any backward, so the first backward gets the second's values)
# %%
import torch

import tracekit as tk

# %%
_last = {}


def div_forward(a, b):
    _last["a"], _last["b"] = a, b
    return a / b, (a, b)


def div_backward(saved, grad):
    a, b = _last["a"], _last["b"]
    return grad / b, -grad * a / (b * b)


div_rule = (div_forward, div_backward)

# %%
_y = [None]


def tanh_forward(x):
    _y[0] = torch.tanh(x)
    return _y[0], (_y[0],)


def tanh_backward(saved, grad):
    return grad * (1 - _y[0] ** 2)


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    return torch.sin(x), (x,)


def sin_backward(saved, grad):
    (x,) = saved
    return grad * torch.cos(x)


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
