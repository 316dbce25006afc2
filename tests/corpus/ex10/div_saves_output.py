# expect: q1=less q2=full q3=full
# why: div saves (y, b) and computes grad_b = -grad * y / b: right gradients, but not what PyTorch's div saves
# %%
import torch

import tracekit as tk

# %%
def div_forward(a, b):
    y = a / b
    return y, (y, b)


def div_backward(saved, grad):
    y, b = saved
    return grad / b, -grad * y / b


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    y = torch.tanh(x)
    return y, (y,)


def tanh_backward(saved, grad):
    (y,) = saved
    return grad * (1 - y * y)


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
