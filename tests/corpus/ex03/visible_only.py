# expect: q1=zero q2=less
# why: counts the saved slice's own bytes (k elements) instead of the storage it pins; q2 returns visible twice (visible right, pinned wrong)

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    return k * torch.empty((), dtype=dtype).element_size()

# %%
def visible_and_pinned(n, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    visible = 2 * (n - 1) * e + 8
    return [visible, visible]

# %%
tk.check("ex03")
