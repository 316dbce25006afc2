# expect: q1=full
# why: one segment for shallow models, two of floor(0.3*depth) blocks from depth 10 on
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    if depth < 10:
        return [(0, depth // 2)]
    k = int(0.3 * depth)
    return [(0, k), (depth - k, depth)]

# %%
tk.check("ex08")
