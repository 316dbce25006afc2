"""ex08's check: a checkpoint plan per depth, run and measured here against the budgets.

The plan is data: nothing of the student's runs here. For each depth the model is built, run with the
plan (`checkpointed_loss`) and backwarded, and measured with tracekit's own meter (storages alive after
the forward; matmuls in backward) against plain_loss measured the same way. This holds no answer (it
says whether a plan fits, not which plan does), so the student's self-check runs it too; the grader
runs it in its own process (`judges/ex08.py`).
"""

from __future__ import annotations

import functools
import json

from .ex08 import DEPTHS, MEMORY_BUDGET, RECOMPUTE_BUDGET, checkpointed_loss, plain_loss, setup
from .watch import Watch

MATMULS = ("mm", "bmm", "addmm", "matmul", "dot", "mv", "baddbmm", "addmv")


def _measure(depth: int, plan: str | None) -> dict:
    """Bytes left alive by the forward and matmuls run by backward, for plain_loss (plan None) or a plan."""
    x, ws = setup(depth)
    segments = json.loads(plan) if plan is not None else None
    with Watch() as forward:
        loss = plain_loss(x, ws) if segments is None else checkpointed_loss(x, ws, segments)
    held = forward.alive_bytes((loss,))
    with Watch() as backward:
        loss.backward()
    return {"held": held, "matmuls": sum(backward.ops[name] for name in MATMULS), "loss": float(loss.detach())}


@functools.lru_cache(maxsize=512)
def measured(depth: int, plan: str | None) -> dict:
    """`_measure`, cached (a plan's facts do not change)."""
    return _measure(depth, plan)


def check_plan(depth: int, segments: object) -> tuple[bool, str]:
    """Whether a plan fits both budgets at this depth, and if not, why."""
    if not isinstance(segments, list):
        return False, "no plan"
    pairs = sorted(tuple(p) for p in segments)
    at = 0
    for start, stop in pairs:
        if not (0 <= start < stop <= depth) or start < at:
            return False, f"segment ({start}, {stop}) is out of range or overlaps another (depth {depth})"
        at = stop
    ref, got = measured(depth, None), measured(depth, json.dumps([list(p) for p in pairs]))
    if got["held"] > MEMORY_BUDGET * ref["held"]:
        return False, f"depth {depth}: {got['held'] / ref['held']:.0%} of the memory stays: checkpoint more"
    if got["matmuls"] - ref["matmuls"] > RECOMPUTE_BUDGET * depth:
        return False, f"depth {depth}: {got['matmuls'] - ref['matmuls']} of {depth} blocks redone: checkpoint fewer"
    return True, ""


def judge_plans(obs: dict) -> tuple[float, str, list[str]]:
    """One share per depth whose plan fits both budgets."""
    plans = obs.get("plans")
    if not isinstance(plans, dict):
        return 0.0, "the checker got no plans", []
    bad: list[str] = []
    hints: list[str] = []
    for depth in DEPTHS:
        ok, hint = check_plan(depth, plans.get(str(depth)))
        if not ok:
            bad.append(str(depth))
            hints.append(hint)
    if not bad:
        return 1.0, "correct", []
    return (len(DEPTHS) - len(bad)) / len(DEPTHS), "; ".join(hints), bad


