# expect: q1=full q2=full
# why: rewrites the program as one expression per output (sin(2a).sum(), 2a + 1), with a module-level call counter; versions from a small rule-based helper

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
CALLS = {"n": 0}


def fixed(a):
    CALLS["n"] += 1
    return torch.sin(2 * a).sum(), torch.add(2 * a, 1)

# %%
def count(writes_before, writes_after, shared=True):
    """Every in-place write through h, a view of h or h.detach() bumps the shared counter; .data does not."""
    return [writes_before, writes_before + (writes_after if shared else 0)]


q2_versions = {
    "V1": count(0, 2), "V2": count(1, 1), "V3": count(0, 1), "V4": count(0, 1), "V5": count(0, 1),
    "V6": count(0, 1, shared=False), "V7": count(2, 3), "V8": count(0, 2), "V9": count(1, 0),
}

# %%
tk.check("ex05")
