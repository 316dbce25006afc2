"""ex07 · Saved-tensor hooks."""

from __future__ import annotations

import random

import torch

from .base import Exercise, Question, close, equal_judge, parts


def _pack_calls(inputs: dict) -> int:
    calls = []
    a = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        (a.sin() * a.cos()).sum()
    return len(calls)


def _draw(rng: random.Random) -> dict:
    return {"a": [round(rng.uniform(-2, 2), 3) for _ in range(rng.randint(3, 8))]}


def _probe(hooks, inputs: dict) -> dict:  # noqa: ANN001
    pack, unpack = hooks
    packed_types = []

    def counting_pack(t: torch.Tensor) -> object:
        out = pack(t)
        packed_types.append(type(out).__name__)
        return out

    a = torch.tensor(inputs["a"], dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(counting_pack, unpack):
        y = (a.exp() * a.sin()).sum()
    y.backward()
    return {"grad": a.grad.tolist(), "packed": packed_types}


def _judge(obs: dict, inputs: dict) -> tuple[float, str]:
    a = torch.tensor(inputs["a"], dtype=torch.float64, requires_grad=True)
    (a.exp() * a.sin()).sum().backward()
    packed = obs.get("packed", [])
    return parts(
        (close(obs.get("grad", []), a.grad.tolist(), 1e-9),
         "unpack must give back exactly what was packed: gradients changed"),
        (bool(packed) and all(t == "int" for t in packed),
         "pack should return a key (an int), keeping the tensor in your own store"),
    )


EXERCISE = Exercise(
    "ex07", "Where residuals live", "07_hooks_offload",
    (
        Question("q1", 1, "y = (a.sin() * a.cos()).sum(): how many times does a pack hook run?",
                 "q1_pack_calls", equal_judge(_pack_calls, "an integer: once per tensor a rule saves")),
        Question("q2", 3, "hooks = (pack, unpack): pack returns an int key into your own store, unpack looks it up",
                 "hooks", _judge, probe=_probe, draw=_draw, kind="code"),
    ),
)
