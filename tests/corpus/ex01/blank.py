# expect: q1=zero q2=zero q3=zero
# why: the untouched student notebook

# %%
import torch

import tracekit as tk

# %%
q1_slots = None  # your answer

# %%
q2_slots = None  # your answer

# %%
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError  # compute σ(x); save one tensor for backward

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

# %%
tk.check("ex01")
