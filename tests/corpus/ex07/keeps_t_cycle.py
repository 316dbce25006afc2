# expect: q1=full q2=less
# lead (round 5): its store keeps t itself, not t.detach(); the prompt says why (a graph dropped without backward leaks) and the checker now drops graphs without backward, so q2 is less (1.5: the gradients half)
# why: the prompt's recipe taken literally (store t itself, handle __del__ drops it): when a rule saves its output (exp, tanh, sigmoid), store -> t -> t.grad_fn -> handle is a cycle through C++ that gc cannot break, so those tensors are never freed (measured here: a graph saving exp's output keeps it after del)
# ambiguous: 'keep t in a store of yours' - keeping t itself leaks saved outputs; t.detach() (del_handle.py) does not. Passes if the measured workload saves only inputs
# lead: the cycle leaks only for a graph dropped without backward (measured: 1 entry left after `del y`, 0 after backward); the checker backwards every graph, and the prompt now says to keep t.detach() for graphs dropped un-run, so this answer passed then
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import itertools

_store = {}
_keys = itertools.count()


class Handle:
    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __del__(self):
        _store.pop(self.key, None)


def pack(t):
    key = next(_keys)
    _store[key] = t
    return Handle(key)


def unpack(handle):
    return _store[handle.key]


hooks = (pack, unpack)

# %%
tk.check("ex07")
