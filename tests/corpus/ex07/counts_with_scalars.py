# expect: q1=less q2=less
# lead (round 5): its store keeps t itself, not t.detach(); the prompt says why (a graph dropped without backward leaks) and the checker now drops graphs without backward, so q2 is less (1.5: the gradients half)
# why: counts the wrapped Python number as a pack call (H10: 2) and both operands of mul always (H3: 2)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 2, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 2}

# %%
import itertools

_store = {}
_keys = itertools.count()


class Handle:
    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __del__(self):
        _store.pop(self.key, None)


def pack(t):
    key = next(_keys)
    _store[key] = t
    return Handle(key)


def unpack(handle):
    return _store[handle.key]


hooks = (pack, unpack)

# %%
tk.check("ex07")
