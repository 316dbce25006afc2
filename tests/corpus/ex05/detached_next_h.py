# expect: q1=full q2=full
# why: out-of-place fix, but the next h is returned detached (same value 2a+1, no history)
# ambiguous: 'returns the same two values ... the next h = 2a + 1': the value is the same, but the buggy program's h carries a graph (requires grad) and this one does not

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    y = h.sin()
    return y.sum(), (h + 1).detach()

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
