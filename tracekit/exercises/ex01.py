"""ex01 · Reverse execution needs forward values."""

from __future__ import annotations

import math
import random

import torch

from ..capture import trace
from ..storage import storage_key
from .base import Exercise, Question, close, equal_judge, parts


def _mul_slots(inputs: dict) -> list[str]:
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    return [r.slot for r in trace(a * b).nodes[0].residuals]


def _tanh_slot(inputs: dict) -> str:
    return trace(torch.randn(3, requires_grad=True).tanh()).residuals[0].slot


def _draw_points(rng: random.Random) -> dict:
    return {"x": [round(rng.uniform(-4, 4), 3) for _ in range(rng.randint(3, 9))]}


def _probe_sigmoid(cls: type, inputs: dict) -> dict:
    x = torch.tensor(inputs["x"], dtype=torch.float64, requires_grad=True)
    y = cls.apply(x)
    tr = trace(y.sum())
    custom = [n for n in tr.nodes if n.name.endswith("Backward") and not n.name[-1].isdigit()]
    saved = [
        {"slot": r.slot, "output": r.storage is not None and r.storage.key == storage_key(y),
         "input": r.storage is not None and r.storage.key == storage_key(x)}
        for n in custom for r in n.residuals
    ]
    y.sum().backward()
    return {"y": y.detach().tolist(), "grad": x.grad.tolist(), "saved": saved, "custom_nodes": len(custom)}


def _judge_sigmoid(obs: dict, inputs: dict) -> tuple[float, str]:
    s = [1 / (1 + math.exp(-v)) for v in inputs["x"]]
    saved = obs.get("saved", [])
    only_output = obs.get("custom_nodes") == 1 and len(saved) == 1 and saved[0]["output"] and not saved[0]["input"]
    return parts(
        (close(obs.get("y", []), s, 1e-9), "forward should return σ(x)"),
        (close(obs.get("grad", []), [v * (1 - v) for v in s], 1e-9), "backward should return grad·σ(x)·(1 − σ(x))"),
        (only_output, "save exactly one tensor for backward, and make it the output, not the input"),
    )


EXERCISE = Exercise(
    "ex01", "Forward values the reverse rules need", "01_forward_values",
    (
        Question("q1", 1, "y = a * b with only a requiring grad: which slots does MulBackward0 save?",
                 "q1_slots", equal_judge(_mul_slots, "a list of PyTorch slot names, like ['self']")),
        Question("q2", 1, "which slot does tanh's reverse rule save: 'self' or 'result'?",
                 "q2_slot", equal_judge(_tanh_slot, "one slot name as a string")),
        Question("q3", 3, "a custom autograd.Function Sigmoid that saves only what its backward needs",
                 "Sigmoid", _judge_sigmoid, probe=_probe_sigmoid, draw=_draw_points, kind="code"),
    ),
)
