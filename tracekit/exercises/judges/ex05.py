"""ex05 judges: the in-place fix and version counters, computed now.

q1: correct = loss sum(sin(2a)), h_next 2a+1 and a.grad 2cos(2a), in the input's dtype and
shape, whether backward is left to the checker (out-of-place update, or sin on a clone) or
run by the function before the in-place update (reorder). Look-right-but-wrong: `.data`
writes (silently wrong gradient), writes under no_grad or through .detach() (still raise),
dropping the +1, a loss computed without a graph.
q2: correct = [h._version when sin saved it, h._version at the end], read from the runtime.
Wrong: forgetting that views, no_grad writes and .detach() share and bump the counter, or
counting a .data write (which does not).
"""

from __future__ import annotations

import math

import torch

from ...internals import version
from ..ex05 import VERSIONS, case_input
from .common import by_table, case_list, close


def versions(program: str) -> list[int]:
    """[saved, now] of h for the program, from the version counter itself."""
    before, after = VERSIONS[program]
    env = {"torch": torch, "a": torch.randn(4, requires_grad=True)}
    exec("h = a * 2", env)  # noqa: S102 - our own program text
    exec(before, env)  # noqa: S102
    saved = version(env["h"])
    exec("y = h.sin()", env)  # noqa: S102
    exec(after, env)  # noqa: S102
    return [saved, version(env["h"])]


def _versions_entry(program: str, got: object) -> tuple[bool, str]:
    if not (isinstance(got, list) and len(got) == 2 and all(type(v) is int for v in got)):
        return False, "give two ints [saved, now]"
    saved, now = versions(program)
    hints = []
    if got[0] != saved:
        hints.append("the version when sin saved h is off (count the writes before y = h.sin())")
    if got[1] != now:
        hints.append("the version backward sees is off (which of these writes bump h's counter?)")
    return not hints, " and ".join(hints)


def judge_q1(obs: dict, inputs: dict) -> tuple[float, str]:
    """Gradient right (whoever ran backward), and the program's results kept."""
    cases = case_list(obs, "cases", inputs)
    if cases is None:
        return 0.0, "the checker got no results from fixed"
    grad_ok = results_ok = True
    for i, seen in enumerate(cases):
        a = case_input(inputs, i).detach().double().flatten().tolist()
        tol = 1e-9 if inputs["cases"][i]["dtype"] == "float64" else 1e-4
        grad_ok &= close(seen.get("grad"), [inputs["weight"] * 2 * math.cos(2 * v) for v in a], tol)
        loss_ok = isinstance(seen.get("loss"), float) and seen.get("loss_numel") == 1 and \
            abs(seen["loss"] - sum(math.sin(2 * v) for v in a)) <= tol * (1 + len(a))
        results_ok &= loss_ok and seen.get("h_shape") == inputs["cases"][i]["shape"] and \
            close(seen.get("h_next"), [2 * v + 1 for v in a], tol)
    fixes = []  # all or nothing: the buggy program's values alone are not a fix
    if not grad_ok:
        fixes.append("a.grad must be d/da sum(sin(2a)), delivered by a real backward through a (the checker's "
                     "gradient hook on a scales it): backward has to run and read the h sin saved, unchanged")
    if not results_ok:
        fixes.append("keep the program's results: the loss sum(sin(2a)) as a scalar, and h_next = 2a + 1")
    return (0.0, "; ".join(fixes)) if fixes else (1.0, "correct")


JUDGES = {"q1": judge_q1, "q2": by_table(_versions_entry)}
