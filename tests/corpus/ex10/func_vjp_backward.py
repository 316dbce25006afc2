# expect: q1=full q2=full q3=full
# why: same saved values; backward calls torch.func.vjp on the saved values (the prompt allows it), imported at first use
# %%
import torch

import tracekit as tk

# %%
def div_forward(a, b):
    return torch.div(a, b), (a, b)


def div_backward(saved, grad):
    from torch.func import vjp

    _, pull = vjp(torch.div, *saved)
    return pull(grad)


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    y = x.tanh()
    return y, (y,)


def tanh_backward(saved, grad):
    from torch.func import vjp

    (y,) = saved
    # tanh' = 1 - y^2 is the vjp of t -> t - t^3/3 at y
    _, pull = vjp(lambda t: t - t.pow(3) / 3, y)
    return pull(grad)[0]


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    return x.sin(), (x,)


def sin_backward(saved, grad):
    from torch.func import vjp

    _, pull = vjp(torch.sin, saved[0])
    return pull(grad)[0]


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
