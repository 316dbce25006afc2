# expect: q1=zero q2=zero
# why: the untouched student notebook

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_largest = None  # your answer

# %%
def adam_state_bytes(model):
    raise NotImplementedError

# %%
tk.check("ex09")
