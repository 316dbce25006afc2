# expect: q1=zero q2=zero q3=zero
# why: the untouched student notebook
# %%
import torch

import tracekit as tk

# %%
def div_forward(a, b):
    raise NotImplementedError  # return (y, saved): saved = the tensors backward needs


def div_backward(saved, grad):
    raise NotImplementedError  # return the gradients (grad_a, grad_b) from saved and grad only


div_rule = (div_forward, div_backward)

# %%
def tanh_forward(x):
    raise NotImplementedError  # return (y, saved): saved = the tensors backward needs


def tanh_backward(saved, grad):
    raise NotImplementedError  # return the gradient from saved and grad only


tanh_rule = (tanh_forward, tanh_backward)

# %%
def sin_forward(x):
    raise NotImplementedError  # return (y, saved): saved = the tensors backward needs


def sin_backward(saved, grad):
    raise NotImplementedError  # return the gradient from saved and grad only


sin_rule = (sin_forward, sin_backward)

# %%
tk.check("ex10")
