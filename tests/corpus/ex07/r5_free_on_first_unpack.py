# expect: q1=full q2=less
# why: q1 right; q2 has a handle class with __del__ but unpack also pops the entry ('backward reads it once'): one backward works and frees early, but retain_graph=True then a second backward finds the entry gone (KeyError), so the two- and three-backward checks fail
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import itertools

_pending = {}
_serial = itertools.count()


class Receipt:
    def __init__(self):
        self.n = next(_serial)

    def __del__(self):
        _pending.pop(self.n, None)


def pack(t):
    receipt = Receipt()
    _pending[receipt.n] = t.detach()
    return receipt

def unpack(receipt):
    return _pending.pop(receipt.n)  # free as soon as backward has read it

hooks = (pack, unpack)

# %%
tk.check("ex07")
