# expect: q1=full q2=full
# why: updates a clone in place (h.clone().add_(1)); versions as tuples

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    y = h.sin()
    h_next = h.clone()
    h_next.add_(1)  # writes the clone's own storage, not the h sin saved
    return y.sum(), h_next

# %%
q2_versions = {
    "V1": (0, 2),
    "V2": (1, 2),
    "V3": (0, 1),
    "V4": (0, 1),
    "V5": (0, 1),
    "V6": (0, 0),
    "V7": (2, 5),
    "V8": (0, 2),
    "V9": (1, 1),
}

# %%
tk.check("ex05")
