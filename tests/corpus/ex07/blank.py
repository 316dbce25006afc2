# expect: q1=zero q2=zero
# why: the untouched student notebook
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = None  # your answer

# %%
def pack(t):
    raise NotImplementedError  # keep t in your store; return a handle that is not a tensor

def unpack(handle):
    raise NotImplementedError

hooks = (pack, unpack)

# %%
tk.check("ex07")
