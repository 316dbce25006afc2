"""ex07 judges: pack-hook counts and a user store, observed now.

q1: correct = the number of pack calls, counted by running the program under counting hooks.
Wrong: counting ops instead of saved tensors; forgetting the saved scalar, or a value saved
twice (sin and cos both save a: two packs).
q2: correct = gradients right with two graphs alive, each backwarded twice in interleaved
order, in float32 or float64, and with 12 big graphs alive at once (288 MiB saved: more than the margin
below, so a store that bounds itself by evicting loses live entries here or keeps too much there)
(half); and, on 16 graphs run one after another (three 8 MiB saved
tensors each, and two graphs dropped without a backward after each), the same gradients and a
memory high-water mark — the kernel's, of a sandbox of
its own — at most 160 MiB above a store that lets go (half). What pack returns is judged only by
what it costs: returning the tensor itself keeps a saved output's graph alive (as keeping `t` does).
Look-right-but-wrong:
`len(STORE)` keys (collide once an entry is removed), `pop` on unpack (second unpack fails),
one global slot (the second graph overwrites the first), a store
that never lets go (grows with every graph), a store that keeps `t` instead of `t.detach()` (a
saved output's grad_fn holds its own handle: a graph dropped without a backward is never freed).
"""

from __future__ import annotations

import functools
import json

import torch

from ..ex07 import PROGRAMS, measure, workload_input
from ..watch import Watch
from .common import by_table, close


def pack_calls(program: str) -> int:
    """Pack-hook calls while the program runs, counted now."""
    src, who = PROGRAMS[program]
    env = {"a": torch.randn(5, requires_grad="a" in who), "b": torch.randn(5, requires_grad="b" in who),
           "x": torch.randn(2, 3), "W": torch.randn(3, 4, requires_grad="W" in who)}
    calls = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        eval(src, env)  # noqa: S307 - our own program text
    return len(calls)


def _calls_entry(program: str, got: object) -> tuple[bool, str]:
    if type(got) is not int:
        return False, "give an int"
    truth = pack_calls(program)
    if got == truth:
        return True, ""
    return False, ("too many: count the tensors the rules save, not the ops" if got > truth else
                   "too few: every saved tensor is packed, each time a rule saves it")


REFERENCE = '''STORE = {}


class Handle:
    def __init__(self, t):
        self.key = id(self)
        STORE[self.key] = t.detach()

    def __del__(self):
        STORE.pop(self.key, None)


hooks = (Handle, lambda handle: STORE[handle.key])'''
GRADE_SLACK = 160 << 20  # kernel bytes above the reference run (a store that never lets go: ~24 MiB per graph)
SELF_SLACK = 4 << 20  # storage bytes above the reference in the self-check (~3 MiB per graph kept)


def reference_cells(question: str) -> list[str]:
    """The code cells of a reference notebook for the measured question (its baseline memory)."""
    return ["import torch\nimport tracekit as tk", REFERENCE]


@functools.lru_cache(maxsize=16)
def reference_watch_peak(question: str, config: str) -> int:
    """The self-check's baseline: the most storage bytes alive at once in the reference's workload."""
    namespace: dict = {}
    exec(REFERENCE, namespace)  # noqa: S102 - our own reference text
    with Watch() as watch:
        measure(namespace["hooks"], json.loads(config))
    return watch.peak


@functools.lru_cache(maxsize=16)
def _workload_sums(config: str) -> list[float]:
    cfg = json.loads(config)
    sums = []
    for k in range(cfg["graphs"]):
        a = workload_input(cfg, k).requires_grad_()
        (g,) = torch.autograd.grad((a.exp() * a.sin()).sum(), a)
        sums.append(float((2 * g).double().sum()))
    return sums


def judge_q2(obs: dict, inputs: dict) -> tuple[float, str]:
    """Gradients under every use (half); the measured run's values and memory (half, once the first holds)."""
    dtype = getattr(torch, inputs["dtype"])
    want = []
    for key, f, times in (("a1", lambda t: (t.exp() * t.sin()).sum(), 3), ("a2", lambda t: (t.tanh() * t).sum(), 2)):
        a = torch.tensor(inputs[key], dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(f(a), a)
        want.append((times * g).double().tolist())
    grads = obs.get("grads") or [None, None]
    tol = 1e-9 if inputs["dtype"] == "float64" else 1e-5
    if not (len(grads) == 2 and close(grads[0], want[0], tol) and close(grads[1], want[1], tol)):
        return 0.0, ("gradients changed: with two graphs alive and each backwarded twice, every unpack must return "
                     "exactly the tensor its own pack received (unique handles, still valid on a second unpack)")
    alive = inputs["alive"]
    alive_sums = _workload_sums(json.dumps(alive, sort_keys=True))
    if "alive_error" in obs or not close(obs.get("alive_sums"), alive_sums, 1e-4):
        why = f" ({obs['alive_error']})" if "alive_error" in obs else ""
        return 0.0, (f"with {alive['graphs']} big graphs alive at once the gradients changed{why}: a store must keep "
                     "every tensor whose graph is alive, however many there are (it may let one go only when its "
                     "handle is dropped)")
    measured = obs.get("measured") or {}
    how = measured.get("how")
    config = inputs["measure"]["self" if how == "watch" else "grade"]
    values = (measured.get("values") or {}).get("values")
    if not isinstance(values, dict):
        why = (measured.get("values") or {}).get("error") or "it did not finish"
        return 0.5, f"the measured run ({config['graphs']} graphs one after another) did not give its values: {why}"
    if not close(values.get("grad_sums"), _workload_sums(json.dumps(config, sort_keys=True)), 1e-4):
        return 0.5, "on the measured run (many graphs one after another) the gradients differ"
    peak, base = measured.get("peak_bytes"), measured.get("reference_peak")
    if type(peak) is not int or type(base) is not int:
        return 0.5, "the memory of the measured run could not be read: not graded (please report this)"
    extra = peak - base
    if extra > (SELF_SLACK if how == "watch" else GRADE_SLACK):
        return 0.5, (f"your store still holds tensors after their graphs were freed: the measured run needed "
                     f"{extra / 2**20:.0f} MiB more than a store that lets go ({config['graphs']} graphs, and graphs "
                     "dropped without a backward): let an entry go when its handle is dropped, and keep "
                     "`t.detach()`, not `t` (a saved output holds its own handle, so a graph dropped without a "
                     "backward is never freed)")
    return 1.0, "correct"


def prepare_q2(inputs: dict) -> None:
    """The truth judge_q2 needs from the big workloads, computed ahead (beside the submission's sandbox)."""
    for config in (inputs["alive"], inputs["measure"]["grade"]):
        _workload_sums(json.dumps(config, sort_keys=True))


JUDGES = {"q1": by_table(_calls_entry), "q2": judge_q2}
PREPARE = {"q2": prepare_q2}
