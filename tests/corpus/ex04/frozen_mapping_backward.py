# expect: q1=full q2=full
# why: read-only MappingProxyType of frozensets; backward(create_graph) into x.grad, reset so a second call repeats
# %%
import torch

import tracekit as tk

# %%
from types import MappingProxyType

_mul = "MulBackward0"
q1_needs = MappingProxyType({
    "R1": frozenset({_mul + ".other"}),
    "R2": frozenset(),
    "R3": frozenset({_mul + ".other"}),
    "R4": frozenset({_mul + ".self"}),
    "R5": frozenset({"ExpBackward0.result"}),
    "R6": frozenset({"PowBackward0.self"}),
    "R7": frozenset({"MmBackward0.mat2"}),
    "R8": frozenset({"ReluBackward0.result"}),
    "R9": frozenset(),
    "R10": frozenset({"TanhBackward0.result", "ExpBackward0.result", _mul + ".self", _mul + ".other"}),
})

# %%
def second_derivative(f, x):
    old = x.grad
    x.grad = None
    f(x).sum().backward(create_graph=True)
    g = x.grad
    x.grad = None
    g.sum().backward()
    h = x.grad.detach().clone()
    x.grad = old
    return h

# %%
tk.check("ex04")
