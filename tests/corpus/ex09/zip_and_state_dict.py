# expect: q1=full q2=full
# why: q1 as dict(zip(ids, names)); q2 sums the model's state_dict tensors (a Linear stack has only parameters there) with a step-size table built by a call

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
ids = ["C1", "C2", "C3", "C4", "C5", "C6"]
names = ["optimizer state", "saved activations", "saved activations", "application references", "saved activations",
         "application references"]
q1_largest = dict(zip(ids, names))

# %%
def _step_bytes():
    return {"step": torch.zeros((), dtype=torch.get_default_dtype()).element_size()}


STEP = _step_bytes()


def adam_state_bytes(model):
    tensors = list(model.state_dict().values())
    return sum(2 * t.numel() * t.element_size() for t in tensors) + STEP["step"] * len(tensors)

# %%
tk.check("ex09")
