# expect: q1=full q2=less
# why: q2 measures the lesson's views scenario (h[:n//2] * h[n//2:]) instead of the asked h[:-1] * h[1:]: pinned right, visible wrong

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    # mul saves the slice big[0, :k] (w needs a gradient); the slice is a view of big's whole n*n storage
    element = torch.empty((), dtype=dtype).element_size()
    return n * n * element

# %%
def visible_and_pinned(n, dtype):
    a = torch.randn(n, dtype=dtype, requires_grad=True)
    h = a * 2
    y = (h[: n // 2] * h[n // 2:]).sum()
    tr = tk.trace(y)
    return [tr.visible_bytes, tr.saved_bytes]

# %%
tk.check("ex03")
