# expect: q1=zero q2=zero
# why: hard-codes answers for the example inputs it tried and returns 0 for anything else

# %%
import torch

import tracekit as tk

# %%
KNOWN = {(1024, 5, torch.float32): 4194304, (1024, 5, torch.float64): 8388608}


def pinned_bytes(n, k, dtype):
    return KNOWN.get((n, k, dtype), 0)

# %%
def visible_and_pinned(n, dtype):
    return {(8, torch.float32): [64, 40]}.get((n, dtype), [0, 0])

# %%
tk.check("ex03")
