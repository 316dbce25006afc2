# expect: q1=full q2=full
# why: lets sin save a private clone of h and keeps the in-place update on h itself; versions as numpy int64

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    y = h.clone().sin()  # sin saves the clone; h's in-place update no longer touches it
    h.add_(1)
    return y.sum(), h

# %%
import numpy as np

q2_versions = {
    "V1": [np.int64(0), np.int64(2)],
    "V2": [np.int64(1), np.int64(2)],
    "V3": [np.int64(0), np.int64(1)],
    "V4": [np.int64(0), np.int64(1)],
    "V5": [np.int64(0), np.int64(1)],
    "V6": [np.int64(0), np.int64(0)],
    "V7": [np.int64(2), np.int64(5)],
    "V8": [np.int64(0), np.int64(2)],
    "V9": [np.int64(1), np.int64(1)],
}

# %%
tk.check("ex05")
