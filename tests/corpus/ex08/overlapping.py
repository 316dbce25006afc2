# expect: q1=zero
# why: overlapping segments (the prompt says not overlapping)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    half = depth // 2
    return [(0, half), (half - 1, half + 1)]

# %%
tk.check("ex08")
