"""ex07 · Saved-tensor hooks (probe side: no truth here)."""

from __future__ import annotations

import gc
import random

import torch

from .base import AnswerError, Exercise, Question, cases_question, lesson_link, programs_table, student
from .watch import Watch

LESSON = "07_hooks_offload"
# id -> (program, which inputs require grad); a, b float32 vectors of length 5, W 3×4, x 2×3
PROGRAMS = {
    "H1": ("(a.sin() * a.cos()).sum()", "a"), "H2": ("a.exp().sum()", "a"), "H3": ("(a * b).sum()", "a"),
    "H4": ("(a + b).sum()", "ab"), "H5": ("a.sigmoid().tanh().sum()", "a"), "H6": ("(a.exp() * b).sum()", "ab"),
    "H7": ("(x @ W).relu().sum()", "W"), "H8": ("(a / b).sum()", "b"), "H9": ("a.pow(3).sum()", "a"),
    "H10": ("(a.relu() * 2).sum()", "a"),
}
WHO = {"a": "only a", "b": "only b", "ab": "a and b", "W": "only W"}
HOOKS_STUB = '''def pack(t):
    raise NotImplementedError  # keep t in your store; return a handle that is not a tensor

def unpack(handle):
    raise NotImplementedError

hooks = (pack, unpack)'''


def _draw(rng: random.Random) -> dict:
    n, m = rng.randint(3, 8), rng.randint(3, 8)
    values = lambda k: [round(rng.uniform(-2, 2), 3) for _ in range(k)]  # noqa: E731
    return {"dtype": rng.choice(["float32", "float64"]), "a1": values(n), "a2": values(m)}


def _is_tensorish(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, tuple | list) and any(isinstance(v, torch.Tensor) for v in value)


def _probe(hooks: object, inputs: dict) -> dict:
    """Two graphs alive under the hooks, each backwarded twice (retain_graph), interleaved; then
    everything dropped: the gradients, what pack returned, and the bytes still alive."""
    if not (isinstance(hooks, tuple | list) and len(hooks) == 2 and all(callable(h) for h in hooks)):
        raise AnswerError("hooks should be a pair (pack, unpack) of functions")
    pack, unpack = hooks
    packed: list[str] = []
    unpacked = [0]

    def watched_pack(t: torch.Tensor) -> object:
        out = student(pack, t)
        packed.append("tensor" if _is_tensorish(out) else type(out).__name__)
        return out

    def watched_unpack(handle: object) -> torch.Tensor:
        unpacked[0] += 1
        return student(unpack, handle)

    dtype = getattr(torch, inputs["dtype"])
    with Watch() as watch:
        a1 = torch.tensor(inputs["a1"], dtype=dtype, requires_grad=True)
        a2 = torch.tensor(inputs["a2"], dtype=dtype, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(watched_pack, watched_unpack):
            y1 = (a1.exp() * a1.sin()).sum()
            y2 = (a2.tanh() * a2).sum()
        student(y2.backward, retain_graph=True)
        student(y1.backward, retain_graph=True)
        student(y1.backward)  # the second unpack of graph 1's values
        student(y2.backward)
        grads = [a1.grad.double().tolist(), a2.grad.double().tolist()]
        del y1, y2, a1, a2
        gc.collect()
        alive = watch.alive_bytes()
    return {"grads": grads, "packed": packed, "unpacked": unpacked[0], "alive_after": alive}


EXERCISE = Exercise(
    "ex07", "Where residuals live", LESSON,
    (
        cases_question("q1", 1, "for each program: how many times a pack hook runs while y is computed",
                       "q1_pack_calls", PROGRAMS, 3, details=(
                     "Each program runs inside `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):`. "
                     "`a`, `b` are float32 vectors of length 5, `x` is 2×3 and `W` 3×4 (float32):\n\n" +
                     programs_table(PROGRAMS, WHO) +
                     "\n\nFor each give an int: the number of pack calls (once per tensor a rule saves; "
                     "a Python number that PyTorch wraps as a 0-dim tensor is saved without the hooks)."),
                       see=f"See {lesson_link(LESSON)}."),
        Question("q2", 3, "hooks = (pack, unpack): keep saved tensors in your own store, correct under every use "
                 "PyTorch allows, and let them go with the graph", "hooks", probe=_probe, draw=_draw, kind="code",
                 details=(
                     "`pack(t)` keeps `t` in a store of yours and returns a handle that is **not** a tensor (an "
                     "int key, or a small object); `unpack(handle)` returns the tensor. PyTorch may unpack a "
                     "handle more than once (`retain_graph=True`, then another backward) and keep several "
                     "graphs alive at once, so handles must stay unique and valid until the graph is gone. "
                     "When a graph is freed, its handles are dropped: your store should then let the tensors "
                     "go (a handle object with `__del__` or `weakref.finalize`, as PyTorch's saved-tensor "
                     "hooks tutorial does for files on disk). The checker runs two graphs (float32 or "
                     "float64) under your hooks, backwards each twice in interleaved order, drops them, and "
                     "measures the bytes your hooks still keep alive. See "
                     f"{lesson_link(LESSON)}."), stub=HOOKS_STUB),
    ),
    topic="hooks",
)
