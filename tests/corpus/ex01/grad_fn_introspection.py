# expect: q1=full q2=full q3=full
# why: tables read off grad_fn._saved_* attributes (only tensor-valued ones) into an OrderedDict; Sigmoid uses a module-level helper def and saves the input

# %%
import torch

import tracekit as tk

# %%
from collections import OrderedDict


def saved_tensor_slots(node):
    """The names of the tensors a grad_fn saved (its _saved_<slot> attributes holding a tensor)."""
    names = set()
    for attr in dir(node):
        if attr.startswith("_saved_") and isinstance(getattr(node, attr), torch.Tensor):
            names.add(attr[len("_saved_"):])
    return names


q1_slots = OrderedDict()
for op in ["mul", "div", "mm", "sub"]:
    for who in ["a", "b", "ab"]:
        a = torch.randn(2, 3) if op == "mm" else torch.randn(5)
        b = torch.randn(3, 4) if op == "mm" else torch.randn(5)
        a.requires_grad_("a" in who)
        b.requires_grad_("b" in who)
        q1_slots[op + ":" + who] = saved_tensor_slots(getattr(torch, op)(a, b).grad_fn)

# %%
q2_slots = OrderedDict(
    (op, saved_tensor_slots(getattr(torch, op)(torch.rand(5, requires_grad=True)).grad_fn))
    for op in "exp tanh sigmoid sin cos log sqrt relu abs reciprocal expm1 log1p rsqrt erf atan neg".split()
)

# %%
def _sigma(t):
    return torch.reciprocal(1 + torch.exp(-t))


class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _sigma(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = _sigma(x)
        return grad * s * (1 - s)

# %%
tk.check("ex01")
