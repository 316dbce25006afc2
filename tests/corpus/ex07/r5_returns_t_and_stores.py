# expect: q1=full q2=less
# why: q1 right (an OrderedDict); q2 appends t.detach() to a module-level list 'store' but returns t itself as the handle and unpack returns it: gradients are right, but the list never lets anything go, so the 16-graph run grows by ~24 MiB per graph (~384 MiB, over the 160 MiB allowance)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from collections import OrderedDict

q1_pack_calls = OrderedDict(
    [("H1", 4), ("H2", 1), ("H3", 1), ("H4", 0), ("H5", 2),
     ("H6", 3), ("H7", 2), ("H8", 2), ("H9", 1), ("H10", 1)]
)

# %%
_saved = []  # my store of everything saved


def pack(t):
    _saved.append(t.detach())
    return t

def unpack(handle):
    return handle

hooks = (pack, unpack)

# %%
tk.check("ex07")
