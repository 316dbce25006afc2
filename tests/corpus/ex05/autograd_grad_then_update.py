# expect: q1=full q2=full
# why: reorder fix done with torch.autograd.grad (gradient taken before the in-place update) and stored in a.grad by hand
# ambiguous: 'reorder so that your function calls loss.backward() itself': this takes the gradient before the update with torch.autograd.grad and writes a.grad itself, without calling loss.backward()

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    loss = h.sin().sum()
    (g,) = torch.autograd.grad(loss, a)
    a.grad = g if a.grad is None else a.grad + g
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
