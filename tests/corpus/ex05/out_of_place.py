# expect: q1=full q2=full
# why: the lesson's out-of-place fix (h + 1); every version worked out by hand

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
