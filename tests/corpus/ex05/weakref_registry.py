# expect: q1=full q2=full
# why: out-of-place fix (torch.add) that also records every returned next h in a module-level weakref.WeakValueDictionary; q2 typed

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
import itertools
import weakref

_NEXT_H = weakref.WeakValueDictionary()
_IDS = itertools.count()


def fixed(a):
    h = a * 2
    loss = torch.sin(h).sum()
    h_next = torch.add(h, 1)
    _NEXT_H[next(_IDS)] = h_next
    return loss, h_next

# %%
q2_versions = {
    "V1": [0, 2],
    "V2": [1, 2],
    "V3": [0, 1],
    "V4": [0, 1],
    "V5": [0, 1],
    "V6": [0, 0],
    "V7": [2, 5],
    "V8": [0, 2],
    "V9": [1, 1],
}

# %%
tk.check("ex05")
