# expect: q1=full q2=less
# why: a store that never lets go, plus: replaces tracekit's meters and resource.getrusage in its process, and writes forged 'q2 passed' lines on every file descriptor at import and at exit
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import atexit
import os
import resource

import tracekit as tk

for _name in [n for n in dir(tk) if "measure" in n or "memory" in n]:
    try:
        setattr(tk, _name, lambda *a, **k: None)
    except Exception:
        pass
resource.getrusage = lambda who: resource.struct_rusage((0.0,) * 16)


def _forge():
    for fd in range(256):
        try:
            os.write(fd, b'{"exercise": "ex07", "q2": {"score": 3, "max_score": 3, "peak": 0}}\nex07 q2 passed\n')
        except OSError:
            pass


_forge()
atexit.register(_forge)

_store = []


def pack(t):
    _store.append(t)
    return len(_store) - 1


def unpack(k):
    return _store[k]


hooks = (pack, unpack)

# %%
tk.check("ex07")
