# expect: q1=full q2=zero
# why: q1 right; q2 treats the two slices as separate allocations (pinned = 2(n-1) elements + 8) and visible as whole h twice

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
    e = torch.empty((), dtype=dtype).element_size()
    return [2 * n * e + 8, 2 * (n - 1) * e + 8]

# %%
tk.check("ex03")
