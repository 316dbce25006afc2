# expect: q1=full q2=less
# why: handles release, but into a queue that a background thread empties only every 30 seconds: the tensors outlive their graphs for the whole measured run
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import itertools
import threading
import time

_store = {}
_dead = []
_keys = itertools.count()


class H:
    def __init__(self, k):
        self.k = k

    def __del__(self):
        _dead.append(self.k)


def _reaper():
    while True:
        time.sleep(30)
        while _dead:
            _store.pop(_dead.pop(), None)


threading.Thread(target=_reaper, daemon=True).start()


def pack(t):
    k = next(_keys)
    _store[k] = t
    return H(k)


def unpack(h):
    return _store[h.k]


hooks = (pack, unpack)

# %%
tk.check("ex07")
