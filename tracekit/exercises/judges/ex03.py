"""ex03 judges: bytes by storage, from tracekit's trace of the program built now.

q1: correct = saved_bytes of (big[0, :k] * w).sum() = the whole n×n allocation of big in its
dtype, for every drawn (n, k, dtype). Look-right-but-wrong: the slice's own bytes (k·size),
a fixed float32 size, the lesson's measured number that also counts the output y.
q2: correct = [visible_bytes, saved_bytes]. Wrong: counting the shared allocation twice, or
forgetting the saved scalar 2 (an 8-byte int64), or a fixed element size.
"""

from __future__ import annotations

import torch

from ...capture import trace
from .common import case_list, drawn_message, each_value


def truth_slice(case: dict) -> int:
    """saved_bytes of the slice program, measured now."""
    dtype = getattr(torch, case["dtype"])
    w = torch.ones(case["k"], dtype=dtype, requires_grad=True)
    big = torch.randn(case["n"], case["n"], dtype=dtype)
    return trace((big[0, : case["k"]] * w).sum()).saved_bytes


def truth_views(case: dict) -> list[int]:
    """[visible_bytes, saved_bytes] of the views program, measured now."""
    a = torch.randn(case["n"], dtype=getattr(torch, case["dtype"]), requires_grad=True)
    h = a * 2
    tr = trace((h[:-1] * h[1:]).sum())
    return [tr.visible_bytes, tr.saved_bytes]


def _itemsize(case: dict) -> int:
    return torch.empty(0, dtype=getattr(torch, case["dtype"])).element_size()


def _slice_entry(case: dict, got: object) -> tuple[bool, str]:
    truth = truth_slice(case)
    if got == truth:
        return True, ""
    if got == truth + _itemsize(case):
        return False, "you also counted y, the output: count only what the saved tensors keep"
    if got == case["k"] * _itemsize(case):
        return False, "you counted the slice's own elements: a view keeps its whole allocation"
    return False, ("not what the graph pins: which allocation does the saved slice belong to, "
                   "and how big is one element of this dtype?")


def judge_q1(obs: dict, inputs: dict) -> tuple[float, str]:
    """Every drawn case right."""
    return each_value(obs, inputs, "pinned_bytes", _slice_entry)


def judge_q2(obs: dict, inputs: dict) -> tuple[float, str]:
    """Every drawn case right; half credit per case for each of the two numbers."""
    values = case_list(obs, "values", inputs)
    if values is None:
        return 0.0, "the checker got no values from visible_and_pinned"
    score, fixes = 0.0, []
    for got, case in zip(values, inputs["cases"]):
        if not (isinstance(got, list) and len(got) == 2):
            fixes.append("return a list of two ints")
            continue
        visible, pinned = truth_views(case)
        score += (got[0] == visible) / 2 + (got[1] == pinned) / 2
        if got[0] != visible:
            fixes.append("the visible bytes are off: add every saved tensor's own bytes, the scalar too")
        if got[1] != pinned:
            fixes.append("the pinned bytes are off: views of one tensor share one allocation; "
                         "the saved scalar has its own")
    return score / len(inputs["cases"]), drawn_message(fixes, len(inputs["cases"]))


JUDGES = {"q1": judge_q1, "q2": judge_q2}
