# expect: q1=full q2=full q3=full
# why: backward re-derives the gradient with torch.autograd.grad on detached copies of the saved values, inside enable_grad (only saved and grad used)
# %%
import torch

import tracekit as tk

# %%
def _grad_of(fn, saved, grad):
    with torch.enable_grad():
        ins = [s.detach().requires_grad_(True) for s in saved]
        out = fn(*ins)
        return torch.autograd.grad(out, ins, grad)


def div_forward(a, b):
    return a / b, (a, b)


def div_backward(saved, grad):
    return _grad_of(torch.div, saved, grad)


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    y = torch.tanh(x)
    return y, (y,)


def tanh_backward(saved, grad):
    return _grad_of(lambda t: t - t ** 3 / 3, saved, grad)[0]


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    return torch.sin(x), (x,)


def sin_backward(saved, grad):
    return _grad_of(torch.sin, saved, grad)[0]


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
