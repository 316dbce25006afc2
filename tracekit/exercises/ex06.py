"""ex06 · Graphs kept alive by application references."""

from __future__ import annotations

import random

import torch

from ..memory import measure
from .base import Exercise, Question, close, parts, plain


def _setup(inputs: dict) -> tuple[torch.nn.Module, torch.Tensor]:
    gen = torch.Generator().manual_seed(inputs["seed"])
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model, torch.randn(64, 32, generator=gen)


def _draw(rng: random.Random) -> dict:
    return {"seed": rng.randint(0, 10**6), "steps": rng.randint(4, 8)}


def _probe(train, inputs: dict) -> dict:  # noqa: ANN001
    model, x = _setup(inputs)
    with measure("cpu") as probe:
        history = train(model, x, inputs["steps"])
        probe.mark("returned")
    grads = sum(p.numel() * 4 for p in model.parameters() if p.grad is not None)
    return {"history": plain(history), "held": probe.result.marks["returned"] - grads}


def _judge(obs: dict, inputs: dict) -> tuple[float, str]:
    model, x = _setup(inputs)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    reference = []
    for _ in range(inputs["steps"]):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        reference.append(loss.item())
    history = obs.get("history")
    return parts(
        (isinstance(history, list) and close(history, reference, 1e-5),
         "return one float per step: the training loss, with SGD(lr=0.1) on model(x).pow(2).mean()"),
        (isinstance(obs.get("held"), int) and obs["held"] <= 1024,
         "the returned history still holds memory that grows with the steps: keep plain numbers"),
    )


EXERCISE = Exercise(
    "ex06", "Stop keeping graphs alive", "06_app_references",
    (Question("q1", 4, "train(model, x, steps): SGD steps returning the loss history without keeping graphs",
              "train", _judge, probe=_probe, draw=_draw, kind="code"),),
)
