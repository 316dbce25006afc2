"""ex09 · A memory budget for a training step."""

from __future__ import annotations

import random

import torch

from .base import Exercise, Question, equal_judge, plain


def _largest(inputs: dict) -> str:
    from ..memory_budget import budget

    b = budget()
    return max(b.at_peak, key=lambda k: b.at_peak[k])


def _draw(rng: random.Random) -> dict:
    return {"sizes": [rng.randint(2, 64) for _ in range(rng.randint(2, 4))]}


def _model(sizes: list[int]) -> torch.nn.Module:
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    return torch.nn.Sequential(*layers)


def _probe(fn, inputs: dict) -> dict:  # noqa: ANN001
    return {"value": plain(fn(_model(inputs["sizes"])))}


def _truth(inputs: dict) -> int:
    model = _model(inputs["sizes"])
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, inputs["sizes"][0])).sum().backward()
    opt.step()
    return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))


EXERCISE = Exercise(
    "ex09", "Budget a training step", "09_budget",
    (
        Question("q1", 2, "tk.budget() on the default model: which category is largest at the peak?",
                 "q1_largest", equal_judge(_largest, "one category name exactly as the budget table writes it")),
        Question("q2", 2, "adam_state_bytes(model): bytes of Adam's state after its first step",
                 "adam_state_bytes", equal_judge(_truth, "an int: Adam keeps two moments per parameter and a "
                 "step count per parameter tensor"), probe=_probe, draw=_draw, kind="code"),
    ),
)
