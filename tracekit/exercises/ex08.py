"""ex08 · Checkpoint to fit a memory budget and a recompute budget (probe side: no truth here).

The answer is a plan — which blocks to checkpoint, for each depth — that the trusted grader
runs itself: memory and recomputation are measured on the grader's own run of the plan, where
nothing of the student's executes."""

from __future__ import annotations

import random

import torch
from torch.utils.checkpoint import checkpoint

from .base import AnswerError, Exercise, Question, expect_function, lesson_link, plain, student

LESSON = "08_recompute"
WIDTH = 32
MEMORY_BUDGET = 0.76  # of plain_loss's activation bytes
RECOMPUTE_BUDGET = 0.6  # of the blocks' forward matmuls, redone in backward
DEPTHS = (6, 7, 8, 9, 10, 11, 12, 14, 16)  # every depth is judged


def plain_loss(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    """The reference model: one block tanh(h @ W) per weight, then the mean square."""
    h = x
    for w in ws:
        h = torch.tanh(h @ w)
    return h.pow(2).mean()


def _blocks(h: torch.Tensor, *ws: torch.Tensor) -> torch.Tensor:
    for w in ws:
        h = torch.tanh(h @ w)
    return h


def checkpointed_loss(x: torch.Tensor, ws: list[torch.Tensor], segments: list[tuple[int, int]]) -> torch.Tensor:
    """plain_loss with each segment [start, stop) of blocks wrapped in one checkpoint (use_reentrant=False)."""
    h, at = x, 0
    for start, stop in sorted(segments):
        h = _blocks(h, *ws[at:start])
        h = checkpoint(_blocks, h, *ws[start:stop], use_reentrant=False)
        at = stop
    return _blocks(h, *ws[at:]).pow(2).mean()


def setup(depth: int, batch: int = 128, seed: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A batch x (float64) and `depth` weights (leaves that require grad)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, WIDTH, generator=gen, dtype=torch.float64)
    ws = [(torch.randn(WIDTH, WIDTH, generator=gen, dtype=torch.float64) / WIDTH**0.5).requires_grad_(True)
          for _ in range(depth)]
    return x, ws


def _draw(rng: random.Random) -> dict:
    return {"depths": list(DEPTHS)}


def _segments(value: object, depth: int) -> list[list[int]]:
    """A plan as plain data: a list of [start, stop) pairs of ints, in range, not overlapping."""
    got = plain(value)
    if not (isinstance(got, list) and all(isinstance(p, list) and len(p) == 2 and all(type(v) is int for v in p)
                                          for p in got)):
        raise AnswerError("checkpoint_plan(depth) should return a list of (start, stop) pairs of ints")
    return got


def _probe(fn: object, inputs: dict) -> dict:
    expect_function(fn, "checkpoint_plan(depth)")
    return {"plans": {str(d): _segments(student(fn, d), d) for d in inputs["depths"]}}


EXERCISE = Exercise(
    "ex08", "Checkpoint to fit a budget", LESSON,
    (Question("q1", 4, f"checkpoint_plan(depth): which blocks to checkpoint so that plain_loss keeps at most "
              f"{MEMORY_BUDGET:.0%} of its activation memory and redoes at most {RECOMPUTE_BUDGET:.0%} of its "
              "blocks in backward", "checkpoint_plan", probe=_probe, draw=_draw, kind="code", details=(
                  "`plain_loss(x, ws)` (imported in the cell below) runs one block `h = torch.tanh(h @ w)` per "
                  "weight, then `h.pow(2).mean()`. `checkpointed_loss(x, ws, segments)` computes the same loss "
                  "with each segment `(start, stop)` of blocks `ws[start:stop]` wrapped in one "
                  "`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`. Write `checkpoint_plan(depth)` "
                  "returning the segments (a list of `(start, stop)` pairs, not overlapping) such that, for a "
                  "model of that depth,\n\n"
                  f"- **memory**: the bytes left alive for backward are at most {MEMORY_BUDGET:.0%} of what "
                  "plain_loss leaves (every storage created during the forward still alive when it returns), "
                  "and\n"
                  f"- **recompute**: backward redoes at most {RECOMPUTE_BUDGET:.0%} of the blocks' matmuls "
                  "(beyond plain_loss's own backward).\n\n"
                  "Checkpointing nothing fails the memory budget; checkpointing everything fails the recompute "
                  "budget. The grader runs `checkpointed_loss` with your plan itself, for every depth in "
                  f"{', '.join(map(str, DEPTHS))} (each depth is an equal share of the points), and measures "
                  "both budgets on its own run — so decide from `depth`, and try your plan with "
                  f"`checkpointed_loss` and `tk.trace` before you submit. See {lesson_link(LESSON)}."),
              stub='''from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    raise NotImplementedError  # return [(start, stop), ...]: the segments of blocks to checkpoint'''),),
    topic="checkpoint",
)
