# expect: q1=full q2=full
# why: estimated from sizes and typed; Adam state = two moments per parameter + a 4-byte float32 step

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_largest = {
    "C1": "optimizer state",  # 0.53 M params: Adam's 2 copies (4 MiB) beat params, and batch 16 saves little
    "C2": "saved activations",  # 4096 x 64 x 4 B per layer, 4 layers; tiny parameters, SGD keeps no state
    "C3": "saved activations",  # 2048 x 128 x 4 B = 1 MiB per layer, 6 layers vs 0.8 MiB of Adam state
    "C4": "application references",  # the 4096 x 1024 input batch (16 MiB) is held by my code
    "C5": "saved activations",  # 1 MiB per layer, 8 layers vs 1.8 MiB of parameters
    "C6": "application references",  # the 2048 x 2048 input batch (16 MiB); the model is tiny
}

# %%
def adam_state_bytes(model):
    # per parameter: exp_avg and exp_avg_sq (same shape and dtype), plus a 0-dim float32 'step' tensor
    total = 0
    for p in model.parameters():
        total += 2 * p.numel() * p.element_size() + 4
    return total

# %%
tk.check("ex09")
