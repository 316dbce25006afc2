# expect: q1=full q2=full q3=full
# why: rules as lambdas over small helpers; sin's derivative as sin(x + pi/2); div's grad_b as -grad_a * a / b
# %%
import torch

import tracekit as tk

# %%
import math


def _div_back(a, b, grad):
    ga = grad / b
    return ga, -ga * a / b


div_rule = (lambda a, b: (a / b, (a, b)), lambda saved, grad: _div_back(*saved, grad))

# %%
def _keep_output(y):
    return y, (y,)


tanh_rule = (lambda x: _keep_output(torch.tanh(x)), lambda saved, grad: grad - grad * saved[0] ** 2)

# %%
sin_rule = (lambda x: (torch.sin(x), (x,)), lambda saved, grad: grad * torch.sin(saved[0] + math.pi / 2))

# %%
tk.check("ex10")
