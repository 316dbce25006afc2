# expect: q1=full q2=zero
# why: q2's cell does not parse; q1 still counts
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

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


def unpack(handle)
    return _store[handle.key]


hooks = (pack, unpack)

# %%
tk.check("ex07")
