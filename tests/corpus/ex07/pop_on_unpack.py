# expect: q1=full q2=less
# why: unpack pops the entry: the second backward (retain_graph=True) finds nothing
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import itertools

_store = {}
_ids = itertools.count()


def pack(t):
    k = next(_ids)
    _store[k] = t
    return k


def unpack(k):
    return _store.pop(k)


hooks = (pack, unpack)

# %%
tk.check("ex07")
