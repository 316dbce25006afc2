# expect: q1=zero q2=full
# why: q1's cell does not parse (unbalanced parenthesis), so pinned_bytes stays undefined; q2 right and still counts

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    # mul saves the slice big[0, :k] (w needs a gradient); the slice is a view of big's whole n*n storage
    element = torch.empty((), dtype=dtype).element_size()
    return (n * n * element

# %%
def visible_and_pinned(n, dtype):
    # a * 2 saves the wrapped 2 (0-dim int64, 8 B); h[:-1] * h[1:] saves two (n-1)-views of h's n-element storage
    element = torch.empty((), dtype=dtype).element_size()
    visible = 2 * (n - 1) * element + 8
    pinned = n * element + 8
    return [visible, pinned]

# %%
tk.check("ex03")
