# expect: q1=full q2=full
# why: a helper class with static methods, torch.finfo(dtype).bits // 8; q2 returns a tuple (visible, pinned)
# ambiguous: q2 asks to return [visible, pinned] (a list); this returns the same two ints as a tuple

# %%
import torch

import tracekit as tk

# %%
class Bytes:
    """Byte arithmetic for the two programs."""

    @staticmethod
    def element(dtype):
        return torch.finfo(dtype).bits // 8

    @staticmethod
    def storage(numel, dtype):
        return numel * Bytes.element(dtype)


def pinned_bytes(n, k, dtype):
    return Bytes.storage(n * n, dtype)

# %%
def visible_and_pinned(n, dtype):
    scalar = torch.iinfo(torch.int64).bits // 8
    return (2 * Bytes.storage(n - 1, dtype) + scalar, Bytes.storage(n, dtype) + scalar)

# %%
tk.check("ex03")
