# expect: q1=full
# why: searches single segments by running checkpointed_loss and tk.trace (memory: storages owned by the graph) and counting matmuls redone in backward with a dispatch mode, as the prompt suggests
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


from torch.utils._python_dispatch import TorchDispatchMode


class _CountMM(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            self.n += 1
        return func(*args, **(kwargs or {}))


def _cost(depth, segments):
    x, ws = setup(depth)
    loss = checkpointed_loss(x, ws, segments) if segments else plain_loss(x, ws)
    kept = sum(s.nbytes for s in tk.trace(loss).graph_owned_storages())
    counter = _CountMM()
    with counter:
        loss.backward()
    return kept, counter.n


_cache = {}


def checkpoint_plan(depth):
    if depth not in _cache:
        plain_kept, plain_mm = _cost(depth, [])
        for length in range(2, depth + 1):
            kept, mm = _cost(depth, [(0, length)])
            if kept <= 0.76 * plain_kept and mm - plain_mm <= 0.60 * depth:
                _cache[depth] = [(0, length)]
                break
    return _cache[depth]

# %%
tk.check("ex08")
