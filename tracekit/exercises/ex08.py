"""ex08 · Checkpoint to fit a memory budget and a recompute budget (probe side: no truth here)."""

from __future__ import annotations

import random
import tracemalloc

import torch

from .base import AnswerError, Exercise, Question, expect_function, lesson_link, student
from .watch import Watch

LESSON = "08_recompute"
WIDTH = 32
MEMORY_BUDGET = 0.76  # of plain_loss's activation bytes
RECOMPUTE_BUDGET = 0.6  # of the blocks' forward matmuls, redone in backward
MATMULS = ("mm", "bmm", "addmm", "matmul", "dot", "mv", "baddbmm", "addmv")


def plain_loss(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    """The reference model: one block tanh(h @ W) per weight, then the mean square."""
    h = x
    for w in ws:
        h = torch.tanh(h @ w)
    return h.pow(2).mean()


def setup(inputs: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The drawn batch x (float64) and the weights (leaves that require grad)."""
    gen = torch.Generator().manual_seed(inputs["seed"])
    x = torch.randn(inputs["batch"], WIDTH, generator=gen, dtype=torch.float64)
    ws = [(torch.randn(WIDTH, WIDTH, generator=gen, dtype=torch.float64) / WIDTH**0.5).requires_grad_(True)
          for _ in range(inputs["depth"])]
    return x, ws


def _draw(rng: random.Random) -> dict:
    return {"seed": rng.randint(0, 10**6), "batch": rng.randint(96, 256), "depth": rng.choice([8, 10, 12])}


def measure_loss(fn: object, inputs: dict, call: object = None) -> dict:
    """Run fn(x, ws) and backward (twice; the second run is measured): bytes it leaves alive
    (torch storages, and the Python heap's growth separately), the matmuls backward runs, the
    loss and gradients."""
    run = call or (lambda f, *a: f(*a))
    x, ws = setup(inputs)
    run(run(fn, x, ws).backward)  # a first run, unmeasured: imports and caches are not the answer's memory
    x, ws = setup(inputs)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with Watch() as forward:
            loss = run(fn, x, ws)
        python_bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise AnswerError("loss_fn should return the loss: a one-element tensor")
    held = forward.alive_bytes((loss,))
    with Watch() as backward:
        run(loss.backward)
    matmuls = sum(backward.ops[name] for name in MATMULS)
    grads = [None if w.grad is None else w.grad.flatten().tolist() for w in ws]
    return {"loss": float(loss.detach()), "grads": grads, "held": held, "python_bytes": max(0, python_bytes),
            "backward_matmuls": matmuls}


def _probe(fn: object, inputs: dict) -> dict:
    expect_function(fn, "loss_fn(x, ws)")
    return measure_loss(fn, inputs, student)


EXERCISE = Exercise(
    "ex08", "Checkpoint to fit a budget", LESSON,
    (Question("q1", 4, f"loss_fn(x, ws): plain_loss's value and gradients, keeping at most "
              f"{MEMORY_BUDGET:.0%} of its activation memory and redoing at most {RECOMPUTE_BUDGET:.0%} of its "
              "blocks in backward", "loss_fn", probe=_probe, draw=_draw, kind="code", details=(
                  "`plain_loss(x, ws)` (imported in the cell below) runs one block `h = torch.tanh(h @ w)` per "
                  "weight, then `h.pow(2).mean()`. Write `loss_fn(x, ws)` returning the same loss (float64, "
                  "gradients for every w to 1e-9) such that\n\n"
                  f"- **memory**: the bytes your call leaves alive for backward are at most {MEMORY_BUDGET:.0%} of "
                  "what plain_loss leaves (measured: every storage created during the call still alive when "
                  "it returns, plus Python heap growth), and\n"
                  f"- **recompute**: backward redoes at most {RECOMPUTE_BUDGET:.0%} of the blocks' matmuls "
                  "(measured: matmuls backward runs beyond plain_loss's own backward).\n\n"
                  "Checkpointing nothing fails the memory budget; checkpointing everything fails the "
                  "recompute budget: choose which blocks to wrap in `torch.utils.checkpoint.checkpoint` "
                  "(`use_reentrant=False`). The depth (8, 10 or 12 blocks) and the batch are drawn at check "
                  f"time, so decide from `len(ws)`. See {lesson_link(LESSON)}."),
              stub='''from tracekit.exercises.ex08 import plain_loss  # the reference model, for comparison

def loss_fn(x, ws):
    return plain_loss(x, ws)  # same value and gradients, within both budgets'''),),
    topic="checkpoint",
)
