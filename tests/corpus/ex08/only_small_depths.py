# expect: q1=less
# why: a dict typed for depths 6-10 only: KeyError for 11, 12, 14, 16 (an intended raise at those depths)
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


_PLANS = {6: [(0, 3)], 7: [(0, 4)], 8: [(0, 4)], 9: [(0, 5)], 10: [(0, 6)]}


def checkpoint_plan(depth):
    return _PLANS[depth]

# %%
tk.check("ex08")
