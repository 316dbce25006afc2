# expect: q1=zero
# why: checkpoints nothing: fails the memory budget at every depth
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    return []

# %%
tk.check("ex08")
