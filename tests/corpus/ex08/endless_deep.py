# expect: q1=less
# why: loops forever for depth >= 12 (an intended endless call, exempt from the run check); right for smaller depths
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    while depth >= 12:
        pass
    return [(0, depth // 2)]

# %%
tk.check("ex08")
