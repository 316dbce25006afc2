# expect: q1=full q2=zero
# why: q2 tries to measure by running the programs but calls backward on the in-place-modified graph, so the cell raises before q2_versions is set (intended)

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    # the buggy program: make backward work without changing what it computes
    h = a * 2
    y = h.sin()
    h_next = h + 1  # out of place: the h sin saved keeps its value (and version)
    return y.sum(), h_next

# %%
a = torch.rand(4, requires_grad=True)
h = a * 2
y = h.sin()
h.mul_(3)
h.add_(1)
y.sum().backward()  # RuntimeError: modified by an inplace operation
q2_versions = {"V1": [0, h._version]}

# %%
tk.check("ex05")
