# expect: q1=full q2=full
# why: dict store of t.detach() keyed by itertools.count, a handle object whose __del__ drops its entry
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
    _store[key] = t.detach()  # detached: a saved output would otherwise hold its own node (a cycle gc cannot see)
    return Handle(key)


def unpack(handle):
    return _store[handle.key]


hooks = (pack, unpack)

# %%
tk.check("ex07")
