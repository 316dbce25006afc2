"""ex05 · In-place mutation and version counters."""

from __future__ import annotations

import math
import random

import torch

from ..capture import capture
from .base import Exercise, Question, close, equal_judge, parts


def _draw(rng: random.Random) -> dict:
    return {"a": [round(rng.uniform(-2, 2), 3) for _ in range(rng.randint(3, 8))]}


def _probe_fixed(fn, inputs: dict) -> dict:  # noqa: ANN001
    a = torch.tensor(inputs["a"], dtype=torch.float64, requires_grad=True)
    loss, h_next = fn(a)
    loss.backward()
    return {"loss": loss.item(), "grad": a.grad.tolist(), "h_next": h_next.detach().tolist()}


def _judge_fixed(obs: dict, inputs: dict) -> tuple[float, str]:
    a = inputs["a"]
    ok_loss = abs(obs.get("loss", math.inf) - sum(math.sin(2 * v) for v in a)) < 1e-9
    return parts(
        (close(obs.get("grad", []), [2 * math.cos(2 * v) for v in a], 1e-9),
         "backward must run and give d/da sum(sin(2a))"),
        (ok_loss and close(obs.get("h_next", []), [2 * v + 1 for v in a], 1e-12),
         "keep the program's results: the loss and h + 1"),
    )


def _versions(inputs: dict) -> list[int]:
    a = torch.randn(4, requires_grad=True)
    with capture() as cap:
        h = a * 2
        y = h.sin()
        h.mul_(3)
        h.add_(1)
    r = next(r for r in cap.trace(y.sum()).residuals if r.status == "modified in place")
    return [r.saved_version, r.version]


EXERCISE = Exercise(
    "ex05", "In-place mutation, diagnosed and fixed", "05_inplace",
    (
        Question("q1", 3, "fixed(a): the same loss and next h as the buggy program, with a working backward",
                 "fixed", _judge_fixed, probe=_probe_fixed, draw=_draw, kind="code"),
        Question("q2", 2, "h = a * 2; y = h.sin(); h.mul_(3); h.add_(1): [version of h when sin saved it, "
                 "version when backward reads it]", "q2_versions",
                 equal_judge(_versions, "two integers: every in-place op bumps the version by one")),
    ),
)
