# expect: q1=zero q2=zero
# why: the untouched student notebook (q1 is still the buggy program: backward raises)

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    # the buggy program: make backward work without changing what it computes
    h = a * 2
    y = h.sin()
    h.add_(1)
    return y.sum(), h

# %%
q2_versions = None  # your answer

# %%
tk.check("ex05")
