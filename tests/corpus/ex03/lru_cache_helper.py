# expect: q1=full q2=full
# why: element sizes from a module-level functools.lru_cache helper (a cache shared by both answers); arithmetic per the lesson

# %%
import torch

import tracekit as tk

# %%
import functools


@functools.lru_cache(maxsize=None)
def element_bytes(dtype):
    return torch.zeros(1, dtype=dtype).untyped_storage().nbytes()


def pinned_bytes(n, k, dtype):
    return n * n * element_bytes(dtype)

# %%
def visible_and_pinned(n, dtype):
    scalar = element_bytes(torch.int64)  # the wrapped 2
    return [2 * (n - 1) * element_bytes(dtype) + scalar, n * element_bytes(dtype) + scalar]

# %%
tk.check("ex03")
