"""ex03 · Memory by storage: what a graph really pins."""

from __future__ import annotations

import random

import torch

from ..capture import trace
from .base import Exercise, Question


def _draw_slice(rng: random.Random) -> dict:
    n = rng.randint(16, 400)
    return {"n": n, "k": rng.randint(1, min(n, 12))}


def _truth_slice(inputs: dict) -> int:
    w = torch.ones(inputs["k"], requires_grad=True)
    big = torch.randn(inputs["n"], inputs["n"])
    return trace((big[0, : inputs["k"]] * w).sum()).saved_bytes


def _draw_views(rng: random.Random) -> dict:
    return {"n": rng.randint(8, 4000)}


def _truth_views(inputs: dict) -> list[int]:
    a = torch.randn(inputs["n"], requires_grad=True)
    h = a * 2
    tr = trace((h[:-1] * h[1:]).sum())
    return [tr.visible_bytes, tr.saved_bytes]


def _call_probe(fn: object, inputs: dict) -> dict:
    from .base import plain

    return {"value": plain(fn(**inputs))}


def _judge_against(truth, expected: str):  # noqa: ANN001, ANN202 - small local factory
    def judge(obs: dict, inputs: dict) -> tuple[float, str]:
        if obs.get("value") == truth(inputs):
            return 1.0, "correct"
        return 0.0, f"wrong for n={inputs['n']}: {expected}"

    return judge


EXERCISE = Exercise(
    "ex03", "What a graph really pins", "03_storage",
    (
        Question("q1", 2, "pinned_bytes(n, k): bytes the graph of (big[0, :k] * w).sum() pins, big = randn(n, n)",
                 "pinned_bytes", _judge_against(_truth_slice, "count the whole backing allocation, not the slice"),
                 probe=_call_probe, draw=_draw_slice, kind="code"),
        Question("q2", 2, "visible_and_pinned(n): [sum of the residuals' own bytes, distinct storage bytes] for "
                 "h = a * 2; (h[:-1] * h[1:]).sum(), a = randn(n)",
                 "visible_and_pinned", _judge_against(_truth_views, "views of one tensor share its storage; "
                 "the scalar 2 is saved too"), probe=_call_probe, draw=_draw_views, kind="code"),
    ),
)
