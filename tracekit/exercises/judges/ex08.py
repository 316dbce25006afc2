"""ex08 judge: the student's checkpoint plan, run and measured here (in the trusted process).

For each depth the grader builds the model, runs `checkpointed_loss` with the plan and
backward, and measures with its own meter (storages alive after the forward; matmuls in
backward) against plain_loss measured the same way. Correct at a depth: valid segments (in
range, not overlapping), memory ≤ 76 % and recompute ≤ 60 %; one share of the points per
depth. With D blocks, one segment of k blocks keeps about (D − k + 1)/D of the activations and
redoes k matmuls. Wrong: no checkpoint (memory), everything in one checkpoint (recompute), a
plan for one depth (fails the others). Nothing of the student's runs here: the plan is data.
"""

from __future__ import annotations

from ..plans import check_plan, judge_plans, measured

__all__ = ["JUDGES", "check_plan", "measured"]


def judge_q1(obs: dict, inputs: dict) -> tuple[float, str, list[str]]:
    """One share per depth whose plan fits both budgets."""
    return judge_plans(obs)


JUDGES = {"q1": judge_q1}
