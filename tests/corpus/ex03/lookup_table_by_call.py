# expect: q1=full q2=full
# why: module-level lookup table of element sizes built by a call, and the wrapped scalar's size measured once at import

# %%
import torch

import tracekit as tk

# %%
def _sizes():
    return {dt: torch.tensor(0, dtype=dt).element_size() for dt in (torch.float32, torch.float64, torch.int64)}


ELEMENT_BYTES = _sizes()


def pinned_bytes(n, k, dtype):
    return ELEMENT_BYTES[dtype] * n ** 2

# %%
WRAPPED_SCALAR_BYTES = torch.tensor(2).nbytes


def visible_and_pinned(n, dtype):
    e = ELEMENT_BYTES[dtype]
    return [(n - 1) * e * 2 + WRAPPED_SCALAR_BYTES, n * e + WRAPPED_SCALAR_BYTES]

# %%
tk.check("ex03")
