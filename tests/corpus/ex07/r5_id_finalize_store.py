# expect: q1=full q2=full
# why: q1 typed right; q2 keeps t.detach() in a dict keyed by id(handle) of a fresh small handle object and registers weakref.finalize(handle, store.pop, key): the id is unique while the handle lives, unpack can read it any number of times, and the entry goes when PyTorch drops the graph's handle
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import weakref

_store = {}


class _Handle:
    __slots__ = ("__weakref__",)


def pack(t):
    handle = _Handle()
    key = id(handle)  # unique while the handle is alive
    _store[key] = t.detach()
    weakref.finalize(handle, _store.pop, key, None)
    return handle

def unpack(handle):
    return _store[id(handle)]

hooks = (pack, unpack)

# %%
tk.check("ex07")
