# expect: q1=zero q2=zero
# why: q1 also counts w (no rule saves it: big needs no grad); q2 forgets the wrapped 2 that a * 2 saves

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    return n * n * e + k * e

# %%
def visible_and_pinned(n, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    return [2 * (n - 1) * e, n * e]

# %%
tk.check("ex03")
