# expect: q1=zero q2=full
# why: gaming: keeps the in-place bug and writes the analytic gradient 2cos(2a) into a.grad so the checker skips backward; backward itself still raises

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    with torch.no_grad():
        a.grad = 2 * torch.cos(2 * a)
    h = a * 2
    y = h.sin()
    h.add_(1)
    return y.sum(), h

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
