# expect: q1=zero q2=zero
# why: adds the scalar output y (which the prompt excludes, unlike the lesson's measurement) to both answers

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    return n * n * e + e  # + the output

# %%
def visible_and_pinned(n, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    return [2 * (n - 1) * e + 8 + e, n * e + 8 + e]

# %%
tk.check("ex03")
