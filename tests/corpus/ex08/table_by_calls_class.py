# expect: q1=full
# why: a class whose __call__ reads a module-level table of plans built by calls for depths 1..64
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def _plan(depth):
    length = max(2, (depth + 1) // 2)
    return ((depth - length) // 2, (depth - length) // 2 + length)


PLANS = {d: [_plan(d)] for d in range(4, 65)}


class Planner:
    def __call__(self, depth):
        return list(PLANS[depth])


checkpoint_plan = Planner()

# %%
tk.check("ex08")
