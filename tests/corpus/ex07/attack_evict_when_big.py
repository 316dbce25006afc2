# expect: q1=full q2=less
# why: a store that never lets go on its own but evicts the oldest entries once it holds over 48 MiB, so the measured run stays flat; several big graphs alive at once get wrong gradients or a KeyError
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import collections

_store = collections.OrderedDict()
_n = [0]
LIMIT = 48 * 2**20


def pack(t):
    _n[0] += 1
    _store[_n[0]] = t
    while sum(x.nbytes for x in _store.values()) > LIMIT and len(_store) > 1:
        _store.popitem(last=False)
    return _n[0]


def unpack(k):
    return _store[k]


hooks = (pack, unpack)

# %%
tk.check("ex07")
