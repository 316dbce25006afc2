# expect: q1=full q2=zero
# why: q2 counts versions from 1 (a fresh tensor 'is version 1'): every entry off by one

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
q2_versions = {"V1": [1, 3], "V2": [2, 3], "V3": [1, 2], "V4": [1, 2], "V5": [1, 2], "V6": [1, 1], "V7": [3, 6],
               "V8": [1, 3], "V9": [2, 2]}

# %%
tk.check("ex05")
