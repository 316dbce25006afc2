# expect: q1=less q2=less
# why: an element-size table that only knows float32: raises KeyError on every float64 draw, right on float32

# %%
import torch

import tracekit as tk

# %%
SIZES = {torch.float32: 4}


def pinned_bytes(n, k, dtype):
    return n * n * SIZES[dtype]

# %%
def visible_and_pinned(n, dtype):
    return [2 * (n - 1) * SIZES[dtype] + 8, n * SIZES[dtype] + 8]

# %%
tk.check("ex03")
