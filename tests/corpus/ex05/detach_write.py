# expect: q1=zero q2=less
# why: updates h.detach() in place (shares the version counter: backward still raises); q2 believes detach and no_grad writes are not counted

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    y = h.sin()
    h.detach().add_(1)
    return y.sum(), h

# %%
q2_versions = {
    "V1": [0, 2],
    "V2": [1, 2],
    "V3": [0, 1],
    "V4": [0, 0],
    "V5": [0, 0],
    "V6": [0, 0],
    "V7": [2, 5],
    "V8": [0, 2],
    "V9": [1, 1],
}

# %%
tk.check("ex05")
