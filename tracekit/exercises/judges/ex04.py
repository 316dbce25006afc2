"""ex04 judges: what a first backward releases, and second derivatives, computed now.

q1: correct = the set of 'Node.slot' residuals of the program's graph (every saved value is
released by a backward without retain_graph), as a set/list in any order; empty for programs
that save nothing. Wrong: answering for another requires-grad pattern; leaving out a value
because "the user holds the leaf" (the graph's reference is released all the same).
q2: correct = autograd's exact f'' for each element, float64 to 1e-9 and float32 to 1e-4
relative, the same on a second call. Wrong: first derivative; x.grad-based answers that
accumulate across calls; finite differences (1e-6 off in float64); a fixed dtype.
"""

from __future__ import annotations

import torch

from ...capture import trace
from ..ex04 import PROGRAMS, make_f
from .common import by_table, case_list, close, parts, set_entry


def needs(program: str) -> frozenset:
    """The residuals of the program's graph, measured now."""
    src, who = PROGRAMS[program]
    a, b = torch.randn(5, requires_grad="a" in who), torch.randn(5, requires_grad="b" in who)
    A, B = torch.randn(2, 3, requires_grad="a" in who), torch.randn(3, 4)  # noqa: N806 - as in the prompt
    y = eval(src, {"a": a, "b": b, "A": A, "B": B})  # noqa: S307 - our own program text
    return frozenset(f"{r.node.name}.{r.slot}" for r in trace(y).residuals)


def judge_q2(obs: dict, inputs: dict) -> tuple[float, str]:
    """Exact second derivatives for both cases, twice each."""
    cases = case_list(obs, "cases", inputs)
    if cases is None:
        return 0.0, "the checker got no results from second_derivative"
    value_ok = repeat_ok = dtype_ok = True
    for seen, case in zip(cases, inputs["cases"]):
        x = torch.tensor(case["x"], dtype=torch.float64).reshape(case["shape"]).requires_grad_()
        (g,) = torch.autograd.grad(make_f(case)(x).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
        tol = 1e-9 if case["dtype"] == "float64" else 1e-4
        calls = seen.get("calls") or [None, None]
        value_ok &= close(calls[0], h.flatten().tolist(), tol)
        repeat_ok &= close(calls[1], h.flatten().tolist(), tol)
        dtype_ok &= seen.get("dtype") == case["dtype"]
    if not value_ok:  # nothing counts until the values are f'' (a right dtype alone earns nothing)
        return 0.0, ("the first call is not f''(x): differentiate the first derivative, which needs a graph "
                     "(create_graph=True); finite differences are not exact enough")
    return parts(
        (True, ""),
        (repeat_ok, "a second call on the same x gives something else: does your answer "
                    "depend on what is already in x.grad?"),
        (dtype_ok, "return the result in x's dtype"),
    )


JUDGES = {
    "q1": by_table(set_entry(needs, "'Node.slot' strings",
                             extra="you listed a value this graph does not save (check which inputs require grad)",
                             missing="a saved value is missing (a leaf you hold is still released by the graph)")),
    "q2": judge_q2,
}
