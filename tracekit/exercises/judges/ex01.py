"""ex01 judges: truth from the runtime for the slots questions and the custom Sigmoid.

q1 / q2 (tables): correct = the set of slots PyTorch's rule saves for that case, given as a
set, list, tuple or (one slot) a string, in any order. Look-right-but-wrong: the slots for
another requires-grad pattern (e.g. mul's {"self", "other"} when only a requires grad), the
input/output swapped. Each wrong case is named, with what to look at.

q3 (Sigmoid): correct = σ forward, grad·σ·(1−σ) backward on float64 and float32, any shape,
with two graphs alive, saving exactly one tensor with save_for_backward: the output (no
recompute) or the input (recompute σ: one exp more per backward, same bytes). Wrong: saving
both, a copy (extra memory), nothing (a global or class attribute: breaks with two graphs),
a tensor stashed on ctx (escapes autograd's version check and saved-tensor hooks).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ...capture import trace
from ..ex01 import BINARY
from .common import Entry, by_table, case_list, close, parts, set_entry


def slots_binary(case: str) -> frozenset:
    """The slots the op's rule saves, measured now on fresh tensors."""
    op, who = case.split(":")
    if op == "mm":
        a, b = torch.randn(2, 3), torch.randn(3, 4)
    else:
        a, b = torch.randn(5), torch.rand(5) + 0.5
    a.requires_grad_("a" in who)
    b.requires_grad_("b" in who)
    y = {"mul": torch.mul, "div": torch.div, "mm": torch.mm, "sub": torch.sub}[op](a, b)
    assert op in BINARY
    return frozenset(r.slot for n in trace(y).nodes for r in n.residuals)


def slots_unary(op: str) -> frozenset:
    """The slots a unary op's rule saves, measured now."""
    x = (torch.rand(5) + 0.5).requires_grad_()
    y = getattr(torch, op)(x)
    node = next(n for n in trace(y).nodes)
    return frozenset(r.slot for r in node.residuals)


def _slots_entry(truth_of: Callable[[str], frozenset]) -> Entry:
    """The same hints for both tables."""
    return set_entry(truth_of, "slot names (strings)",
                     extra="you named a slot this rule does not save: which input's gradient would need it?",
                     missing="a saved slot is missing: write each input's gradient formula and see what it reads",
                     both="some slot you named is not saved, and a saved one is missing")


judge_q1 = by_table(_slots_entry(slots_binary))  # each drawn case: the set of slots equals the runtime's
judge_q2 = by_table(_slots_entry(slots_unary))  # each drawn op: the set of slots equals the runtime's


def judge_q3(obs: dict, inputs: dict) -> tuple[float, str]:
    """Values, gradients (both dtypes, two graphs), and exactly one saved tensor: the input or the output."""
    cases = case_list(obs, "cases", inputs)
    if cases is None:
        return 0.0, "the checker got no observations for your Sigmoid"
    values_ok = grads_ok = saves_ok = True
    fixes: list[str] = []
    kinds = set()
    for seen, case in zip(cases, inputs["cases"]):
        tol = 1e-12 if case["dtype"] == "float64" else 2e-6
        s = [1 / (1 + math.exp(-v)) for v in case["x"]]
        values_ok &= seen.get("dtype") == case["dtype"] and close(seen.get("y"), s, tol)
        grads_ok &= close(seen.get("grad"), [g * v * (1 - v) for g, v in zip(case["g"], s)], tol)
        saved = seen.get("saved") or []
        if seen.get("on_ctx"):
            saves_ok = False
            fixes.append("a tensor is stored as a ctx attribute: use ctx.save_for_backward, so autograd can "
                         "check versions and run saved-tensor hooks on it")
        elif len(saved) != 1:
            saves_ok = False
            fixes.append("save exactly one tensor with ctx.save_for_backward" if saved else
                         "nothing is saved with ctx.save_for_backward: backward must read what forward saved "
                         "(a value kept elsewhere breaks when two graphs are alive)")
        elif not (saved[0].get("output") or saved[0].get("input")):
            saves_ok = False
            fixes.append("the saved tensor is neither x nor the returned output: a copy costs extra memory")
        else:
            kinds.add("output" if saved[0].get("output") else "input")
    if not seen.get("has_graph", True):
        values_ok = False
    sub = inputs["substitute"]
    s2 = [1 / (1 + math.exp(-v)) for v in sub["x2"]]
    if saves_ok and not close(obs.get("substituted"), [g * v * (1 - v) for g, v in zip(sub["g"], s2)], 1e-12):
        saves_ok = False
        fixes.append("backward does not use what ctx.save_for_backward saved (when the saved value is swapped "
                     "through saved-tensor hooks, your gradient does not follow): read it with ctx.saved_tensors, "
                     "and keep no other copy on ctx or elsewhere")
    raised = [c["backward_raised"] for c in cases if isinstance(c, dict) and c.get("backward_raised")]
    score, message = parts(
        (values_ok, "forward should return σ(x) = 1/(1+exp(−x)) in x's dtype"),
        (grads_ok, "backward should return grad·σ(x)·(1 − σ(x)), for every call, with several graphs alive"
                   + (f" (your backward raised {raised[0]})" if raised else "")),
        (saves_ok, "; ".join(dict.fromkeys(fixes)) or "save exactly one tensor"),
    )
    if score == 1:
        if kinds == {"output"}:
            message = "correct: you save the output, so backward needs no recompute (what torch.sigmoid does)"
        elif kinds == {"input"}:
            message = ("correct: you save the input and recompute σ in backward — the same bytes as saving the "
                       "output, plus one exp per backward (torch.sigmoid saves the output instead)")
    return score, message


JUDGES = {"q1": judge_q1, "q2": judge_q2, "q3": judge_q3}
