# expect: q1=full q2=less
# why: gaming the described check: drops an entry after its second unpack (the checker backwards twice), so a third backward with retain_graph=True fails; a handle never releases on its own
# ambiguous: passes every use the prompt says the checker makes; wrong under 'every use PyTorch allows' (a third backward)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
_store, _uses = {}, {}
_n = [0]


def pack(t):
    _n[0] += 1
    _store[_n[0]] = t
    _uses[_n[0]] = 0
    return _n[0]


def unpack(k):
    t = _store[k]
    _uses[k] += 1
    if _uses[k] >= 2:
        del _store[k]
    return t


hooks = (pack, unpack)

# %%
tk.check("ex07")
