# expect: q1=zero q2=full
# why: pinned_bytes never returns (a while loop whose condition never changes: the grader must time it out); q2 right

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    total, row = 0, 0
    while row < n:  # forgot row += 1
        total += n * torch.empty((), dtype=dtype).element_size()
    return total

# %%
def visible_and_pinned(n, dtype):
    # a * 2 saves the wrapped 2 (0-dim int64, 8 B); h[:-1] * h[1:] saves two (n-1)-views of h's n-element storage
    element = torch.empty((), dtype=dtype).element_size()
    visible = 2 * (n - 1) * element + 8
    pinned = n * element + 8
    return [visible, pinned]

# %%
tk.check("ex03")
