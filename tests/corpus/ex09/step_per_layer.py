# expect: q1=full q2=less
# why: one step tensor per Linear layer instead of per parameter tensor: right only for models without bias

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
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return sum(2 * p.nbytes for p in model.parameters()) + 4 * len(layers)

# %%
tk.check("ex09")
