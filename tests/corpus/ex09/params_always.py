# expect: q1=zero q2=zero
# why: answers 'parameters' for every setup and returns the parameters' own bytes for Adam's state

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_largest = {f"C{i}": "parameters" for i in range(1, 7)}

# %%
def adam_state_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())

# %%
tk.check("ex09")
