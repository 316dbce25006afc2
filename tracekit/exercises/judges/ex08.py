"""ex08 judge: same loss and gradients, within a memory budget AND a recompute budget.

Truth is plain_loss measured now the same way (storages alive after the forward, matmuls in
backward). With D blocks, one checkpointed segment of k blocks keeps (D − k + 1)/D of the
activations and redoes k matmuls; the budgets (memory ≤ 76 %, recompute ≤ 60 %) admit k = 3–4
of 8, 4–6 of 10, 4–7 of 12, or several shorter segments. Correct: any such choice, written
with checkpoint(use_reentrant=False) or a custom autograd.Function that recomputes. Look-
right-but-wrong: no checkpoint (memory), one checkpoint around everything (recompute), a
fixed segment for depth 8 only (fails other depths), offloading activations into numpy/bytes
(Python heap growth is measured too), a loss computed in float32 (gradients off). Not seen:
activations written to disk (not memory; the prompt asks for checkpointing).
"""

from __future__ import annotations

import functools
import json

from ..ex08 import MEMORY_BUDGET, RECOMPUTE_BUDGET, measure_loss, plain_loss
from .common import close

PYTHON_HEAP_SLACK = 128 * 1024


@functools.lru_cache(maxsize=64)
def reference(key: str) -> dict:
    """plain_loss measured on these inputs (the same inputs give the same facts: cached)."""
    return measure_loss(plain_loss, json.loads(key))


def judge_q1(obs: dict, inputs: dict) -> tuple[float, str]:
    """Same values (half), memory budget (quarter), recompute budget (quarter)."""
    ref = reference(json.dumps(inputs, sort_keys=True))
    grads = obs.get("grads")
    same = isinstance(obs.get("loss"), float) and abs(obs["loss"] - ref["loss"]) < 1e-10 and \
        isinstance(grads, list) and len(grads) == len(ref["grads"]) and \
        all(close(g, r, 1e-9) for g, r in zip(grads, ref["grads"]))
    held, heap, matmuls = obs.get("held"), obs.get("python_bytes"), obs.get("backward_matmuls")
    memory_ok = type(held) is int and held <= MEMORY_BUDGET * ref["held"] and \
        type(heap) is int and heap <= PYTHON_HEAP_SLACK
    recompute = matmuls - ref["backward_matmuls"] if type(matmuls) is int else None
    recompute_ok = recompute is not None and recompute <= RECOMPUTE_BUDGET * inputs["depth"]
    fixes = []
    if not same:
        fixes.append("compute the same loss as plain_loss, with the same gradients for every w (float64); "
                     "the budgets count only once the values are right")
    if same and not memory_ok:
        fixes.append(f"too much memory stays alive for backward (more than {MEMORY_BUDGET:.0%} of plain_loss's, "
                     f"for depth {inputs['depth']}): checkpoint more blocks")
    if same and not recompute_ok:
        fixes.append(f"backward redoes too many blocks (more than {RECOMPUTE_BUDGET:.0%} of {inputs['depth']}): "
                     "checkpoint fewer")
    score = 0.5 * same + 0.25 * (same and memory_ok) + 0.25 * (same and recompute_ok)
    return score, "correct" if not fixes else "; ".join(fixes)


JUDGES = {"q1": judge_q1}
