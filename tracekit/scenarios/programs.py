"""The small programs the lessons show as editable source and several scenarios run: lesson 4's
exp_times, lesson 3's shared_views, and the tanh(h @ W) blocks of lessons 7 and 8 with their checkpointing."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    noop_context_fn,
)

from ..models import seeded_chain

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

WIDTH, DEPTH, BATCH, SEGMENT = 256, 8, 512, 4  # activations (512×256 floats = 512 KiB each) dominate
MODEL = f"{DEPTH} × tanh(h @ W), W {WIDTH}×{WIDTH}, batch {BATCH}"


def exp_times(a: torch.Tensor) -> torch.Tensor:
    """Lesson 4's program: y = sum(exp(a) * a)."""
    e = a.exp()  # exp's rule reads its output e
    return (e * a).sum()  # mul's rule reads e (for a's gradient) and a (for e's)


def shared_views(a: torch.Tensor) -> torch.Tensor:
    """Lesson 3's program: one allocation h, saved by two multiplications as four views."""
    h = a * 2  # one allocation ...
    half = h.shape[0] // 2
    return (h[:half] * h[half:]).sum() + (h[::2] * h[1::2]).sum()  # ... saved as four views


def block(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One layer of lessons 7 and 8: a matmul, then a pointwise activation."""
    return torch.tanh(h @ w)


def segment(h: torch.Tensor, *ws: torch.Tensor) -> torch.Tensor:
    """Several blocks in a row."""
    for w in ws:
        h = block(h, w)
    return h


def save_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    """Selective checkpointing policy: keep what matmuls produce, recompute the pointwise ops."""
    if op == torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def mlp_loss(x: torch.Tensor, ws: list[torch.Tensor], every: int = 0, policy: Any = None) -> torch.Tensor:
    """The blocks, checkpointed every `every` blocks (0: not at all), selectively if a policy is given."""
    h, step = x, every or len(ws)
    for i in range(0, len(ws), step):
        if not every:
            h = segment(h, *ws[i:i + step])
            continue
        ctx = partial(create_selective_checkpoint_contexts, policy) if policy else noop_context_fn
        h = checkpoint(segment, h, *ws[i:i + step], use_reentrant=False, context_fn=ctx)
    return h.pow(2).mean()


def mlp_inputs(dev: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The batch and the DEPTH weight matrices the recompute and offload scenarios run (seed 0)."""
    return seeded_chain(BATCH, WIDTH, DEPTH, dev, seed=0)
