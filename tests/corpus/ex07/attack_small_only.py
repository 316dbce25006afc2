# expect: q1=full q2=less
# why: releases with the graph only small tensors (the self-check's sizes); tensors of 1 MiB or more go to a list that is never emptied
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import itertools

_store = {}
_big = []
_keys = itertools.count()


class H:
    def __init__(self, k):
        self.k = k

    def __del__(self):
        _store.pop(self.k, None)


def pack(t):
    k = next(_keys)
    _store[k] = t
    if t.nbytes >= 2**20:
        _big.append(t)
    return H(k)


def unpack(h):
    return _store[h.k]


hooks = (pack, unpack)

# %%
tk.check("ex07")
