# expect: q1=full q2=full
# why: q1 a MappingProxyType; the handle is a small __slots__ box holding the tensor: the store is the handles themselves, gone with the graph
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from types import MappingProxyType

q1_pack_calls = MappingProxyType({"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1})

# %%
class Box:
    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def pack(t):
    return Box(t.detach())


def unpack(box):
    return box.tensor


hooks = (pack, unpack)

# %%
tk.check("ex07")
