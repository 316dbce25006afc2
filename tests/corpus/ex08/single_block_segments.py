# expect: q1=zero
# why: checkpoints every other block alone: a one-block segment keeps its output anyway, so no memory is saved
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    return [(i, i + 1) for i in range(0, depth, 2)]

# %%
tk.check("ex08")
