# expect: q1=full q2=full
# why: q1 as a types.MappingProxyType (a mapping); q2 hands out keys from itertools.count wrapped in an int subclass whose __del__ pops the store entry: the handle is 'an int key', unique, readable any number of times, and dropped with the graph; the store keeps t.detach() under the plain int, so nothing else holds the handle
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from types import MappingProxyType

q1_pack_calls = MappingProxyType({
    "H1": 4,   # sin saves a, cos saves a, mul saves both factors
    "H2": 1,   # exp saves its result
    "H3": 1,   # only a needs a gradient: mul keeps b
    "H4": 0,   # add keeps nothing
    "H5": 2,   # sigmoid result, tanh result
    "H6": 3,   # exp result, then mul keeps both factors
    "H7": 2,   # mm keeps x (for W's gradient), relu keeps its result
    "H8": 2,   # d(a/b)/db needs a and b
    "H9": 1,   # pow keeps its input
    "H10": 1,  # relu result; the 2 is a Python number
})

# %%
import itertools

_tensors = {}
_counter = itertools.count()


class Key(int):
    """An int key that takes its tensor with it when PyTorch lets go of it."""

    def __del__(self):
        _tensors.pop(int(self), None)


def pack(t):
    key = Key(next(_counter))
    _tensors[int(key)] = t.detach()
    return key

def unpack(key):
    return _tensors[int(key)]

hooks = (pack, unpack)

# %%
tk.check("ex07")
