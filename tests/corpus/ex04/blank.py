# expect: q1=zero q2=zero
# why: the untouched student notebook
# %%
import torch

import tracekit as tk

# %%
q1_needs = None  # your answer

# %%
def second_derivative(f, x):
    raise NotImplementedError

# %%
tk.check("ex04")
