# expect: q1=zero
# why: the untouched student notebook
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    raise NotImplementedError  # return [(start, stop), ...]: the segments of blocks to checkpoint

# %%
tk.check("ex08")
