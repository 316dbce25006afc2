# expect: q1=less q2=less
# why: hard-codes 4 bytes per element (right for float32 draws, wrong for float64)

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    return n * n * 4

# %%
def visible_and_pinned(n, dtype):
    return [2 * (n - 1) * 4 + 8, n * 4 + 8]

# %%
tk.check("ex03")
