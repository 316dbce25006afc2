# expect: q1=less q2=less
# why: q1 says mm saves both x and W in H7 (3 instead of 2); q2 is a bounded LRU cache (OrderedDict, 32 entries, oldest evicted): with 12 graphs x 3 saves alive at once the oldest graph's tensors are evicted before its backward (KeyError), and the cache keeps up to 32 x 8 MiB of dead graphs' tensors
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = dict(H1=4, H2=1, H3=1, H4=0, H5=2, H6=3, H7=3, H8=2, H9=1, H10=1)

# %%
import itertools
from collections import OrderedDict

CAPACITY = 32
_cache = OrderedDict()
_keys = itertools.count()


def pack(t):
    key = next(_keys)
    _cache[key] = t.detach()
    while len(_cache) > CAPACITY:
        _cache.popitem(last=False)  # evict the least recently used
    return key

def unpack(key):
    _cache.move_to_end(key)
    return _cache[key]

hooks = (pack, unpack)

# %%
tk.check("ex07")
