# expect: q1=zero q2=full
# why: silences the version check with h.data.add_(1): backward runs but uses the updated h, so a.grad is wrong (the prompt warns about exactly this)

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    y = h.sin()
    h.data.add_(1)
    return y.sum(), h

# %%
q2_versions = {
    "V1": [0, 2],
    "V2": [1, 2],
    "V3": [0, 1],
    "V4": [0, 1],
    "V5": [0, 1],
    "V6": [0, 0],
    "V7": [2, 5],
    "V8": [0, 2],
    "V9": [1, 1],
}

# %%
tk.check("ex05")
