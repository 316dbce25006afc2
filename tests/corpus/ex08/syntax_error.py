# expect: q1=zero
# why: the answer cell does not parse
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth)
    return [(0, depth // 2)]

# %%
tk.check("ex08")
