# expect: q1=full q2=full
# why: dtype.itemsize arithmetic; results returned as numpy int64 scalars

# %%
import torch

import tracekit as tk

# %%
import numpy as np


def pinned_bytes(n, k, dtype):
    return np.int64(n) * np.int64(n) * np.int64(dtype.itemsize)

# %%
def visible_and_pinned(n, dtype):
    size = np.int64(dtype.itemsize)
    two = np.int64(torch.int64.itemsize)  # the Python 2, wrapped as a 0-dim int64
    return [2 * (n - 1) * size + two, n * size + two]

# %%
tk.check("ex03")
