# expect: q1=full
# why: one segment over the first floor(0.6*depth) blocks: recompute <= 60%, and it drops L-1 of the depth activations (>= 24% for every graded depth)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


import math


def checkpoint_plan(depth):
    return [(0, math.floor(0.6 * depth))]

# %%
tk.check("ex08")
