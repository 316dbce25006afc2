# expect: q1=less
# why: hard-coded the plan that works for depth 8 ([(0, 4)]): fails 6 (recompute 67%) and 14, 16 (memory)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    return [(0, 4)]

# %%
tk.check("ex08")
