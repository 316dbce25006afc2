# expect: q1=full q2=full
# why: right byte counts, but computed with true division so they come back as floats (800.0) where the prompt says int
# ambiguous: 'Return, as an int' / 'two ints': a float equal to the right int, e.g. 800.0 — numpy/0-dim numbers are accepted elsewhere, is an integral float?

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    return n * n * torch.finfo(dtype).bits / 8

# %%
def visible_and_pinned(n, dtype):
    e = torch.finfo(dtype).bits / 8
    return [2 * (n - 1) * e + 64 / 8, n * e + 64 / 8]

# %%
tk.check("ex03")
