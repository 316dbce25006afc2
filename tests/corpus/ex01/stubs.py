# expect: q1=zero q2=zero q3=zero
# why: stubs: empty dicts and a Sigmoid that returns its input with a pass-through gradient

# %%
import torch

import tracekit as tk

# %%
q1_slots = {}

# %%
q2_slots = dict()

# %%
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad

# %%
tk.check("ex01")
