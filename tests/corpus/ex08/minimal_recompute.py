# expect: q1=full
# why: the shortest single segment that meets the memory budget, from the count of activations it drops (L-1 of depth)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    for length in range(2, depth + 1):
        if (depth - (length - 1)) / depth <= 0.76:
            assert length / depth <= 0.60
            return [(1, 1 + length)]
    raise ValueError(depth)

# %%
tk.check("ex08")
