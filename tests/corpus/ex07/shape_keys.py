# expect: q1=full q2=less
# why: handles are the tensor's shape and dtype: two graphs (or two saved tensors of one shape) overwrite each other, wrong gradients
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
_store = {}


def pack(t):
    key = (tuple(t.shape), str(t.dtype))
    _store[key] = t
    return key


def unpack(key):
    return _store[key]


hooks = (pack, unpack)

# %%
tk.check("ex07")
