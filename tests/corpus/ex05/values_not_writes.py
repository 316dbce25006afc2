# expect: q1=full q2=less
# why: q2 thinks the counter tracks changes of value and ignores writes through views and .detach(): V3, V5, V7, V8 wrong

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
q2_versions = {
    "V1": [0, 2],
    "V2": [1, 2],
    "V3": [0, 0],
    "V4": [0, 1],
    "V5": [0, 0],
    "V6": [0, 0],
    "V7": [0, 3],
    "V8": [0, 0],
    "V9": [1, 1],
}

# %%
tk.check("ex05")
