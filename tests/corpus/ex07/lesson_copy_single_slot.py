# expect: q1=less q2=less
# why: q1 answers 1 for every program; q2 keeps only the last packed tensor in one slot (fine for one saved tensor, wrong for two graphs at once)
# lead: a table question gives a share per right entry (every case is judged), so half the table right scores half, not zero
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {f"H{i}": 1 for i in range(1, 11)}

# %%
_last = {}


def pack(t):
    _last["t"] = t
    return "last"


def unpack(handle):
    return _last["t"]


hooks = (pack, unpack)

# %%
tk.check("ex07")
