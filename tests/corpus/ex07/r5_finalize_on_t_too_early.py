# expect: q1=less q2=less
# why: q1 counts the Python 2 in H10 as a save (2 instead of 1); q2 ties each entry's lifetime to the tensor t it was handed (weakref.finalize(t, ...)) instead of to the handle: an intermediate activation dies right after the forward, so its entry is popped before backward and unpack raises KeyError (only leaves the caller holds survive)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 2}

# %%
import itertools
import weakref

_store = {}
_ids = itertools.count()


def pack(t):
    key = next(_ids)
    _store[key] = t.detach()
    weakref.finalize(t, _store.pop, key, None)  # let it go when the tensor goes
    return key

def unpack(key):
    return _store[key]

hooks = (pack, unpack)

# %%
tk.check("ex07")
