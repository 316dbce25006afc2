# expect: q1=less
# why: ceil(0.6*depth) blocks: over the recompute budget where 0.6*depth is not an integer (6, 7, 8, 9, 11, 12, 14, 16), right at 10
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


import math


def checkpoint_plan(depth):
    return [(0, math.ceil(0.6 * depth))]

# %%
tk.check("ex08")
