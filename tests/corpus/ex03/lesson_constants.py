# expect: q1=zero q2=zero
# why: returns the lesson's printed numbers (4 MiB slice; the views scenario's 32,776 / 16,392 B) whatever the input

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    return 4194304

# %%
def visible_and_pinned(n, dtype):
    return [32776, 16392]

# %%
tk.check("ex03")
