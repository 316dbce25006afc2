"""Scenario 8: a small slice pinning a large allocation; saved views sharing one; shapes vs storage vs measured."""

from __future__ import annotations

from typing import Any

import torch

from ..capture import trace
from ..memory import check_device, measure
from ..render.figures import KIB, figure_and_axes
from ..results import ScenarioResult
from ..storage import allocated_bytes, format_bytes, format_exact
from .common import N, predicted
from .programs import shared_views

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def _slice_of_big(w: torch.Tensor) -> torch.Tensor:
    big = torch.randn(1024, 1024, device=w.device)  # 4 MiB, reachable afterwards only through the graph
    piece = big[0, :5]  # a 20-byte view
    return (piece * w).sum()  # mul saves `piece` for w's gradient


def storage_evidence(device: str = "cpu") -> ScenarioResult:
    """A small slice pinning a large allocation; several saved views sharing one; shapes vs storage vs measured."""
    dev = check_device(device)
    d = str(dev)
    w = torch.ones(5, device=dev, requires_grad=True)
    with measure(dev) as probe:
        y = _slice_of_big(w)
        probe.mark("slice: after forward")
        tr_slice = trace(y)
        slice_predicted = predicted(tr_slice.graph_owned_storages(), d) + allocated_bytes(y.nbytes, d)
        del y
        probe.mark("slice: graph dropped")
    m_slice = probe.result
    a = torch.randn(N, device=dev, requires_grad=True)
    with measure(dev) as probe:
        z = shared_views(a)
        probe.mark("views: after forward")
        tr_views = trace(z)
        views_predicted = predicted(tr_views.graph_owned_storages(), d) + allocated_bytes(z.nbytes, d)
    m_views = probe.result
    slice_res = next(r for r in tr_slice.residuals if r.shape == (5,))
    h_views = [r for r in tr_views.residuals if r.storage is not None and r.storage.nbytes == N * 4]
    values = {
        "slice_visible": slice_res.nbytes, "slice_pinned": slice_res.pinned_nbytes,
        "slice_measured": m_slice.marks["slice: after forward"], "slice_predicted": slice_predicted,
        "views_count": len(h_views), "views_storages": len({id(r.storage) for r in h_views}),
        "views_naive": tr_views.visible_bytes, "views_storage_truth": tr_views.saved_bytes,
        "views_measured": m_views.marks["views: after forward"], "views_predicted": views_predicted,
    }
    facts = {
        "slice": "big = randn(1024, 1024); piece = big[0, :5]; y = (piece * w).sum()",
        "slice residual": f"{slice_res.label}: visible {format_bytes(slice_res.nbytes)} / "
        f"pinned {format_bytes(slice_res.pinned_nbytes)}",
        "slice: measured after forward": f"{format_exact(values['slice_measured'])}, "
        f"predicted {format_exact(slice_predicted)}",
        "views": "h = a * 2; (h[:n/2] * h[n/2:]).sum() + (h[::2] * h[1::2]).sum()",
        "views saved": f"{values['views_count']} residual views of {values['views_storages']} allocation",
        "views: naive sum of shapes": format_exact(values["views_naive"]),
        "views: storage truth": format_exact(values["views_storage_truth"]),
        "views: measured after forward": f"{format_exact(values['views_measured'])}, "
        f"predicted {format_exact(views_predicted)} (graph-only storages + output)",
        "measured by": m_views.source,
    }
    return ScenarioResult("storage_evidence", d, facts, values=values,
                          traces={"slice": tr_slice, "views": tr_views},
                          measurements={"slice": m_slice, "views": m_views}, plot=storage_figure)


def storage_figure(result: ScenarioResult) -> Any:
    """Naive sum of shapes, storage truth and measured bytes, for the slice and the shared views."""
    v = result.values
    fig, ax = figure_and_axes()
    groups = ["slice of a big tensor", "views of one tensor"]
    series = {
        "sum of shapes": [v["slice_visible"], v["views_naive"]],
        "storage truth": [v["slice_pinned"], v["views_storage_truth"]],
        "measured": [v["slice_measured"], v["views_measured"]],
    }
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([g + (i - 1) * 0.27 for g in range(2)], [b / KIB for b in vals], width=0.27, label=name)
    ax.set_xticks(range(2), groups)
    ax.set_yscale("log")
    ax.set_ylabel("KiB (log scale)")
    ax.set_title(f"what the graph really pins, on {result.device}")
    ax.legend()
    fig.tight_layout()
    return fig
