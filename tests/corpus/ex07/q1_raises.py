# expect: q1=zero q2=less
# lead (round 5): its store keeps t itself, not t.detach(); the prompt says why (a graph dropped without backward leaks) and the checker now drops graphs without backward, so q2 is less (1.5: the gradients half)
# why: q1's cell raises (intended: ZeroDivisionError while building it); q2 still counts
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1 // 0}

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
