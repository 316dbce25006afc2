# expect: q1=less
# why: reads (start, stop) as inclusive and gives (0, L-1) for L = floor(0.6*depth): one block too short, misses the memory budget at depth 6 (L-2 < 0.24*depth)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    last = int(0.6 * depth) - 1
    return [(0, last)]

# %%
tk.check("ex08")
