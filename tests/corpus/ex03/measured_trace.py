# expect: q1=full q2=full
# why: builds the very program inside the function and returns what tk.trace measures (saved_bytes / visible_bytes)

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    w = torch.ones(k, dtype=dtype, requires_grad=True)
    big = torch.randn(n, n, dtype=dtype)
    y = (big[0, :k] * w).sum()
    return int(tk.trace(y).saved_bytes)

# %%
def visible_and_pinned(n, dtype):
    a = torch.randn(n, dtype=dtype, requires_grad=True)
    h = a * 2
    y = (h[:-1] * h[1:]).sum()
    tr = tk.trace(y)
    return [int(tr.visible_bytes), int(tr.saved_bytes)]

# %%
tk.check("ex03")
