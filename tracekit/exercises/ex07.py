"""ex07 · Saved-tensor hooks (probe side: no truth here)."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from .base import AnswerError, AnswerRaised, Exercise, Question, cases_question, lesson_link, programs_table, student

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


# the measured run: graphs one after another under the hooks, each saving three 8 MiB tensors, each
# backwarded twice and dropped; a store that keeps what a freed graph saved grows by ~24 MiB per graph
GRADE_SIZE = {"graphs": 16, "n": 1 << 21}
SELF_SIZE = {"graphs": 12, "n": 1 << 18}
# graphs alive at once in the probe: 12 × 24 MiB saved, more than the measured run's margin, so a store
# that stays small by evicting entries (by bytes, by count, oldest first) loses ones still in use
ALIVE_SIZE = {"graphs": 12, "n": 1 << 21}
# the self-check keeps as many graphs alive, of 1 MiB tensors (36 MiB saved, above its 4 MiB slack): the
# same property in a student's kernel, next to the lesson, within 1 GiB
SELF_ALIVE_SIZE = {"graphs": 12, "n": 1 << 18}


def _draw(rng: random.Random) -> dict:
    n, m = rng.randint(3, 8), rng.randint(3, 8)
    values = lambda k: [round(rng.uniform(-2, 2), 3) for _ in range(k)]  # noqa: E731
    seed = rng.randint(0, 10**6)
    return {"dtype": rng.choice(["float32", "float64"]), "a1": values(n), "a2": values(m),
            "alive": {"seed": seed + 2, **ALIVE_SIZE},
            "measure": {"grade": {"seed": seed, **GRADE_SIZE}, "self": {"seed": seed + 1, **SELF_SIZE}}}


def _pair(hooks: object) -> tuple:
    if not (isinstance(hooks, tuple | list) and len(hooks) == 2 and all(callable(h) for h in hooks)):
        raise AnswerError("hooks should be a pair (pack, unpack) of functions")
    return tuple(hooks)


def _probe(hooks: object, inputs: dict) -> dict:
    """Two graphs alive under the hooks, backwarded two and three times (retain_graph), interleaved: the
    gradients; then many big graphs alive at once, backwarded newest first: their gradient sums."""
    pack, unpack = _pair(hooks)
    dtype = getattr(torch, inputs["dtype"])
    a1 = torch.tensor(inputs["a1"], dtype=dtype, requires_grad=True)
    a2 = torch.tensor(inputs["a2"], dtype=dtype, requires_grad=True)
    with _under(pack, unpack):
        y1 = (a1.exp() * a1.sin()).sum()
        y2 = (a2.tanh() * a2).sum()
    student(y2.backward, retain_graph=True)
    student(y1.backward, retain_graph=True)
    student(y1.backward, retain_graph=True)  # the second unpack of graph 1's values
    student(y1.backward)  # and a third: PyTorch allows as many as retain_graph keeps
    student(y2.backward)
    grads = [a1.grad.double().tolist(), a2.grad.double().tolist()]
    try:
        return {"grads": grads, "alive_sums": _alive(pack, unpack, inputs["alive"])}
    except AnswerRaised as err:
        return {"grads": grads, "alive_error": str(err)}


def _under(pack: Callable, unpack: Callable) -> torch.autograd.graph.saved_tensors_hooks:
    """The answer's hooks around a forward pass; whatever they raise is the answer's."""
    return torch.autograd.graph.saved_tensors_hooks(lambda t: student(pack, t), lambda h: student(unpack, h))


def _workload_graph(pack: Callable, unpack: Callable, config: dict, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k-th graph of a run (three 4·n-byte saved tensors) under the answer's hooks: (input, loss)."""
    a = workload_input(config, k).requires_grad_()
    with _under(pack, unpack):
        return a, (a.exp() * a.sin()).sum()


def _backward_twice(y: torch.Tensor) -> None:
    student(y.backward, retain_graph=True)
    student(y.backward)


def _alive(pack: Callable, unpack: Callable, config: dict) -> list[float]:
    graphs = [_workload_graph(pack, unpack, config, k) for k in range(config["graphs"])]
    for _, y in reversed(graphs):  # the newest first: the oldest entries are the last ones unpacked
        _backward_twice(y)
    return [float(a.grad.double().sum()) for a, _ in graphs]


def workload_input(config: dict, k: int) -> torch.Tensor:
    """The k-th graph's input of the measured run (float32, config["n"] values)."""
    return torch.randn(config["n"], generator=torch.Generator().manual_seed(config["seed"] + k))


def measure(hooks: object, config: dict) -> dict:
    """The measured workload: graphs one after another under the hooks, each backwarded twice, then
    dropped, and after each two graphs dropped without a backward (the grader reads the memory
    this needed from the kernel, outside the process): a store that keeps what a freed graph saved, or
    keeps a saved output itself (`t`, not `t.detach()`: a cycle through its `grad_fn`), grows."""
    pack, unpack = _pair(hooks)
    sums = []
    for k in range(config["graphs"]):
        a, y = _workload_graph(pack, unpack, config, k)
        _backward_twice(y)
        sums.append(float(a.grad.double().sum()))
        del y, a
        for extra in (1, 2):  # two graphs dropped without a backward
            a, y = _workload_graph(pack, unpack, config, extra * config["graphs"] + k)
            del y, a
    return {"grad_sums": sums}


EXERCISE = Exercise(
    "ex07", "Where residuals live", LESSON,
    (
        cases_question("q1", 1, "for each program: how many times a pack hook runs while y is computed",
                       "q1_pack_calls", PROGRAMS, details=(
                     "Each program runs inside `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):`. "
                     "`a`, `b` are float32 vectors of length 5, `x` is 2×3 and `W` 3×4 (float32):\n\n" +
                     programs_table(PROGRAMS, WHO) +
                     "\n\nFor each give an int: the number of pack calls (once per tensor a rule saves; "
                     "a Python number that PyTorch wraps as a 0-dim tensor is saved without the hooks)."),
                       see=f"See {lesson_link(LESSON)}."),
        Question("q2", 3, "hooks = (pack, unpack): keep saved tensors in your own store, correct under every use "
                 "PyTorch allows, and let them go with the graph", "hooks", probe=_probe, draw=_draw, kind="code",
                 measure=measure, details=(
                     "`pack(t)` keeps `t` in a store of yours and returns a handle that is **not** a tensor (an "
                     "int key, or a small object); `unpack(handle)` returns the tensor. PyTorch may unpack a "
                     "handle more than once (`retain_graph=True`, then another backward) and keep several "
                     "graphs alive at once, so handles must stay unique and valid until the graph is gone. "
                     "When a graph is freed, its handles are dropped: your store should then let the tensors "
                     "go (a handle object with `__del__` or `weakref.finalize`, as PyTorch's saved-tensor "
                     "hooks tutorial does for files on disk). Keep `t.detach()` rather than `t`: when a rule saves "
                     "its own output, that tensor's `grad_fn` holds your handle, so a store that keeps the output "
                     "itself makes a cycle through PyTorch's C++ graph that the garbage collector cannot break if "
                     "the graph is dropped without a backward (after a backward, saved values are released and "
                     "the cycle goes). The checker runs two graphs (float32 or "
                     "float64) under your hooks, backwards them two and three times, interleaved, and checks the "
                     "gradients; then it keeps "
                     f"{ALIVE_SIZE['graphs']} graphs alive at once (three {ALIVE_SIZE['n'] * 4 >> 20} MiB "
                     "saved tensors each) and backwards them, newest first; then it runs "
                     f"{GRADE_SIZE['graphs']} graphs one after another, each saving three tensors of "
                     f"{GRADE_SIZE['n'] * 4 >> 20} MiB, each backwarded twice and dropped, each followed by two "
                     "graphs dropped without a backward, and reads the most "
                     "memory that run needed from the operating system (outside your notebook's process): a "
                     "store that keeps a freed graph's tensors grows by about 24 MiB per graph (one that keeps "
                     "`t` itself, by about 16 MiB per graph dropped without a backward), and the answer "
                     "passes when the run needs at most 160 MiB more than a store done right. (What `pack` returns "
                     "is judged only by what it costs: returning `t` itself makes the same cycle as keeping it.) "
                     "See "
                     f"{lesson_link(LESSON)}."), stub=HOOKS_STUB,
                 self_check=lambda drawn: {**drawn, "alive": {**drawn["alive"], **SELF_ALIVE_SIZE}}),
    ),
    topic="hooks",
)
