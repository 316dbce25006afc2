"""Scenario 5: plain, retained, recomputed and checkpointed backward: equal gradients, measured peak and time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..capture import trace
from ..memory import check_device, measure
from ..render.figures import figure_and_axes
from ..results import ScenarioResult
from ..storage import format_bytes
from .common import max_diff, predicted, take_grads, timed
from .programs import MODEL, SEGMENT, mlp_inputs, mlp_loss, save_matmuls

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def _recompute_variants(x: torch.Tensor, ws: list[torch.Tensor]) -> dict[str, Callable[[], list[torch.Tensor]]]:
    def plain() -> list[torch.Tensor]:
        mlp_loss(x, ws).backward()
        return take_grads(ws)

    def retained() -> list[torch.Tensor]:
        loss = mlp_loss(x, ws)
        loss.backward(retain_graph=True)
        take_grads(ws)
        loss.backward()  # the second pass reuses every saved activation
        return take_grads(ws)

    def recomputed() -> list[torch.Tensor]:
        mlp_loss(x, ws).backward()
        take_grads(ws)
        mlp_loss(x, ws).backward()  # a fresh forward instead of a kept graph
        return take_grads(ws)

    def checkpointed() -> list[torch.Tensor]:
        mlp_loss(x, ws, every=SEGMENT).backward()
        return take_grads(ws)

    def selective() -> list[torch.Tensor]:
        mlp_loss(x, ws, every=SEGMENT, policy=save_matmuls).backward()
        return take_grads(ws)

    return {"plain backward": plain, "retain_graph + second backward": retained,
            "recomputed forward + second backward": recomputed,
            f"checkpoint every {SEGMENT} blocks (use_reentrant=False)": checkpointed,
            f"selective checkpoint every {SEGMENT} blocks (save matmuls)": selective}


def recompute(device: str = "cpu") -> ScenarioResult:
    """Plain, retained, recomputed and checkpointed backward: equal gradients, measured peak and time."""
    dev = check_device(device)
    x, ws = mlp_inputs(dev)
    loss = mlp_loss(x, ws)
    tr = trace(loss)
    activations = predicted(tr.graph_owned_storages(), str(dev))
    del tr, loss
    variants = _recompute_variants(x, ws)
    reference = None
    rows: dict[str, dict[str, Any]] = {}
    measurements = {}
    for name, run in variants.items():
        run()  # warm-up: first-call allocations and kernel selection are not part of the story
        with measure(dev) as probe:
            grads = run()
        _, seconds = timed(run, str(dev))  # timed without the profiler
        reference = grads if reference is None else reference
        diff = max(max_diff(g, r) for g, r in zip(grads, reference))
        measurements[name] = probe.result
        rows[name] = {"peak": probe.result.peak, "seconds": seconds, "max_diff": diff}
    base = rows["plain backward"]
    facts = {"model": MODEL, "saved activations (trace)": format_bytes(activations)}
    for name, r in rows.items():
        facts[name] = (f"peak {format_bytes(r['peak'])} ({r['peak'] / base['peak']:.2f}×), "
                       f"time {r['seconds'] * 1e3:.1f} ms ({r['seconds'] / base['seconds']:.2f}×), "
                       f"grad max |diff| {r['max_diff']:.1e}")
    return ScenarioResult("recompute", str(dev), facts, values={"rows": rows, "activations": activations},
                          measurements=measurements, plot=recompute_figure)


def recompute_figure(result: ScenarioResult) -> Any:
    """Peak memory and time of each recompute variant, relative to plain backward."""
    rows = result.values["rows"]
    names = list(rows)
    base = rows[names[0]]
    fig, ax = figure_and_axes()
    pos = range(len(names))
    ax.barh([p + 0.2 for p in pos], [rows[n]["peak"] / base["peak"] for n in names], height=0.4, label="peak memory")
    ax.barh([p - 0.2 for p in pos], [rows[n]["seconds"] / base["seconds"] for n in names], height=0.4, label="time")
    ax.set_yticks(list(pos), names)
    ax.axvline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("relative to plain backward (measured)")
    ax.set_title(f"recompute on {result.device}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig
