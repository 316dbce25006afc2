# expect: q1=full
# why: one segment over the last depth//2 blocks, bounds as numpy int64, returned as a list of lists
# ambiguous: 'a list of (start, stop) pairs' - pairs as 2-element lists of numpy ints rather than tuples of ints
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    import numpy as np

    n = np.int64(depth)
    return [[n - n // 2, n]]

# %%
tk.check("ex08")
