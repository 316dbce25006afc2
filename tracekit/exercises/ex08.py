"""ex08 · Checkpoint to fit a memory budget."""

from __future__ import annotations

import random

import torch

from ..capture import trace
from .base import Exercise, Question, close, parts

DEPTH, WIDTH = 8, 32


def _setup(inputs: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(inputs["seed"])
    x = torch.randn(inputs["batch"], WIDTH, generator=gen, dtype=torch.float64)
    ws = [(torch.randn(WIDTH, WIDTH, generator=gen, dtype=torch.float64) / WIDTH**0.5).requires_grad_(True)
          for _ in range(DEPTH)]
    return x, ws


def plain_loss(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    """The reference model: DEPTH blocks of tanh(h @ W), then the mean square."""
    h = x
    for w in ws:
        h = torch.tanh(h @ w)
    return h.pow(2).mean()


def _draw(rng: random.Random) -> dict:
    return {"seed": rng.randint(0, 10**6), "batch": rng.randint(64, 256)}


def _graph_bytes(loss: torch.Tensor) -> int:
    return sum(s.nbytes for s in trace(loss).graph_owned_storages())


def _probe(fn, inputs: dict) -> dict:  # noqa: ANN001
    x, ws = _setup(inputs)
    loss = fn(x, ws)
    saved = _graph_bytes(loss)
    loss.backward()
    return {"loss": loss.item(), "grads": [v for w in ws for v in w.grad.flatten().tolist()], "saved": saved}


def _judge(obs: dict, inputs: dict) -> tuple[float, str]:
    x, ws = _setup(inputs)
    loss = plain_loss(x, ws)
    budget = _graph_bytes(loss) // 2
    loss.backward()
    grads = [v for w in ws for v in w.grad.flatten().tolist()]
    same = abs(obs.get("loss", float("inf")) - loss.item()) < 1e-10 and close(obs.get("grads", []), grads, 1e-9)
    return parts(
        (same, "compute the same loss as plain_loss, with the same gradients"),
        (isinstance(obs.get("saved"), int) and obs["saved"] <= budget,
         "the graph still keeps more than half of plain_loss's activations: checkpoint more"),
    )


EXERCISE = Exercise(
    "ex08", "Checkpoint to fit a budget", "08_recompute",
    (Question("q1", 4, "loss_fn(x, ws): plain_loss's value and gradients, keeping at most half its activations",
              "loss_fn", _judge, probe=_probe, draw=_draw, kind="code"),),
)
