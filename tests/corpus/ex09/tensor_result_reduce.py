# expect: q1=full q2=full
# why: q1 from a comprehension over category groups; q2 computed with functools.reduce and returned as a 0-dim int64 tensor

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
groups = {
    "optimizer state": ["C1"],
    "saved activations": ["C2", "C3", "C5"],
    "application references": ["C4", "C6"],
}
q1_largest = {cid: category for category, cids in groups.items() for cid in cids}

# %%
from functools import reduce


def adam_state_bytes(model):
    per_param = (torch.tensor(2 * p.nbytes + 4, dtype=torch.int64) for p in model.parameters())
    return reduce(lambda acc, x: acc + x, per_param, torch.tensor(0, dtype=torch.int64))

# %%
tk.check("ex09")
