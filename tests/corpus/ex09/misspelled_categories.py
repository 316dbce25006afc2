# expect: q1=zero q2=full
# why: right ideas but not the budget table's words ('optimizer', 'activations', 'inputs'); q2 right

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_largest = {"C1": "optimizer", "C2": "activations", "C3": "activations", "C4": "inputs", "C5": "activations",
              "C6": "inputs"}

# %%
def adam_state_bytes(model):
    # per parameter: exp_avg and exp_avg_sq (same shape and dtype), plus a 0-dim float32 'step' tensor
    total = 0
    for p in model.parameters():
        total += 2 * p.numel() * p.element_size() + 4
    return total

# %%
tk.check("ex09")
