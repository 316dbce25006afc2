# expect: q1=full q2=full
# why: q1 a collections.abc.Mapping subclass over sorted lists turned into sets; q2 a callable class instance on a detached copy of x
# %%
import torch

import tracekit as tk

# %%
from collections.abc import Mapping


class Needs(Mapping):
    def __init__(self, rows):
        self._rows = {k: set(v) for k, v in rows}

    def __getitem__(self, key):
        return self._rows[key]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)


q1_needs = Needs([
    ("R1", ["MulBackward0.other"]), ("R2", []), ("R3", ["MulBackward0.other"]),
    ("R4", ["MulBackward0.self"]), ("R5", ["ExpBackward0.result"]), ("R6", ["PowBackward0.self"]),
    ("R7", ["MmBackward0.mat2"]), ("R8", ["ReluBackward0.result"]), ("R9", []),
    ("R10", ["ExpBackward0.result", "MulBackward0.other", "MulBackward0.self", "TanhBackward0.result"]),
])

# %%
class SecondDerivative:
    calls = 0

    def __call__(self, f, x):
        type(self).calls += 1
        t = x.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(t).sum(), t, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), t)
        return h.to(x.dtype)


second_derivative = SecondDerivative()

# %%
tk.check("ex04")
