# expect: q1=zero q2=zero
# why: the untouched student notebook

# %%
import torch

import tracekit as tk

# %%
def pinned_bytes(n, k, dtype):
    raise NotImplementedError

# %%
def visible_and_pinned(n, dtype):
    raise NotImplementedError  # return [visible, pinned]

# %%
tk.check("ex03")
