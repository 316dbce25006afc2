"""ex04 · Repeated backward, retain_graph, create_graph."""

from __future__ import annotations

import random

import torch

from .base import Exercise, Question, close, equal_judge, plain


def _second_backward_raises(program) -> bool:  # noqa: ANN001 - a small local helper
    a = torch.randn(4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    y = program(a, b)
    y.backward()
    try:
        y.backward()
    except RuntimeError:
        return True
    return False


def _draw_f(rng: random.Random) -> dict:
    return {"p": rng.randint(1, 4), "c": round(rng.uniform(0.5, 2.5), 3),
            "x": [round(rng.uniform(-2, 2), 3) for _ in range(rng.randint(3, 7))]}


def _f(inputs: dict):  # noqa: ANN202
    p, c = inputs["p"], inputs["c"]
    return lambda t: t**p * torch.sin(c * t)


def _probe_second(fn, inputs: dict) -> dict:  # noqa: ANN001
    x = torch.tensor(inputs["x"], dtype=torch.float64, requires_grad=True)
    out = fn(_f(inputs), x)
    return {"value": plain(out.detach().tolist() if isinstance(out, torch.Tensor) else out)}


def _judge_second(obs: dict, inputs: dict) -> tuple[float, str]:
    x = torch.tensor(inputs["x"], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(_f(inputs)(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    value = obs.get("value")
    if isinstance(value, list) and close(value, h.tolist(), 1e-8):
        return 1.0, "correct"
    return 0.0, "return the elementwise second derivative as a tensor: differentiate a derivative that has a graph"


EXERCISE = Exercise(
    "ex04", "Retain, recompute or record", "04_retention",
    (
        Question("q1", 1, "y = (a * 2).sum(): does a second y.backward() raise? (True/False)",
                 "q1_raises", equal_judge(lambda _: _second_backward_raises(lambda a, b: (a * 2).sum()),
                                          "True or False: does the mul rule save anything?")),
        Question("q2", 1, "y = (a + b).sum(): does a second y.backward() raise? (True/False)",
                 "q2_raises", equal_judge(lambda _: _second_backward_raises(lambda a, b: (a + b).sum()),
                                          "True or False: does the add rule save anything?")),
        Question("q3", 3, "second_derivative(f, x): d²f/dx² at each element of x",
                 "second_derivative", _judge_second, probe=_probe_second, draw=_draw_f, kind="code"),
    ),
)
