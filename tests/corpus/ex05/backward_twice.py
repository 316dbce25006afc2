# expect: q1=less q2=full
# why: reorder fix that calls loss.backward(retain_graph=True) twice (a 'check' run), so a.grad is doubled; loss and h right

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    loss = h.sin().sum()
    loss.backward(retain_graph=True)
    loss.backward()
    h.add_(1)
    return loss, h

# %%
q2_versions = {
    "V1": [0, 2],
    "V2": [1, 2],
    "V3": [0, 1],
    "V4": [0, 1],
    "V5": [0, 1],
    "V6": [0, 0],
    "V7": [2, 5],
    "V8": [0, 2],
    "V9": [1, 1],
}

# %%
tk.check("ex05")
