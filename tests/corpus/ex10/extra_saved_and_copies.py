# expect: q1=less q2=less q3=less
# why: div saves (a, b, y); tanh and sin save clones instead of the tensors themselves
# %%
import torch

import tracekit as tk

# %%
def div_forward(a, b):
    y = a / b
    return y, (a, b, y)


def div_backward(saved, grad):
    a, b, _ = saved
    return grad / b, -grad * a / (b * b)


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    y = torch.tanh(x)
    return y, (y.clone(),)


def tanh_backward(saved, grad):
    (y,) = saved
    return grad * (1 - y * y)


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    return torch.sin(x), (x.detach().clone(),)


def sin_backward(saved, grad):
    (x,) = saved
    return grad * torch.cos(x)


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
