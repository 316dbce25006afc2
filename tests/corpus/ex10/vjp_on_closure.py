# expect: q1=full q2=less q3=less
# why: tanh and sin backwards call torch.func.vjp on the forward's input captured in a closure list, saved only a dummy: backward does not use saved alone
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
_inputs = []


def tanh_forward(x):
    _inputs.append(x)
    return torch.tanh(x), ()


def tanh_backward(saved, grad):
    from torch.func import vjp

    _, pull = vjp(torch.tanh, _inputs.pop(0))
    return pull(grad)[0]


tanh_rule = (tanh_forward, tanh_backward)

# %%
_sin_inputs = []


def sin_forward(x):
    _sin_inputs.append(x)
    return torch.sin(x), ()


def sin_backward(saved, grad):
    return grad * torch.cos(_sin_inputs.pop(0))


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
