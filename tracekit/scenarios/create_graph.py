"""Scenario 3: create_graph records a differentiable graph of the derivative; retain_graph does not."""

from __future__ import annotations

import torch

from ..capture import trace
from ..memory import check_device
from ..results import ScenarioResult
from ..rows import Status
from ..storage import format_bytes
from .common import N, max_diff

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def create_graph(device: str = "cpu") -> ScenarioResult:
    """create_graph records a differentiable graph of the derivative; retain_graph does not."""
    dev = check_device(device)
    x = torch.linspace(-2, 2, N, device=dev, requires_grad=True)
    y = (x.sin() * x).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)  # g = sin x + x cos x
    tr_g = trace(g.sum())
    (h,) = torch.autograd.grad(g.sum(), x)  # h = 2 cos x - x sin x
    xd = x.detach()
    err_g = max_diff(g, xd.sin() + xd * xd.cos())
    err_h = max_diff(h, 2 * xd.cos() - xd * xd.sin())

    y2 = (x.sin() * x).sum()
    (g2,) = torch.autograd.grad(y2, x, retain_graph=True)
    tr_y2 = trace(y2)
    facts = {
        "program": "g = grad(y, x, create_graph=True); h = grad(g.sum(), x)",
        "derivative g has a graph": f"yes: {len(tr_g.nodes)} nodes, {len(tr_g.residuals)} residuals, "
        f"{format_bytes(tr_g.saved_bytes)} pinned",
        "g vs sin x + x cos x": f"max |diff| = {err_g:.2e}",
        "second derivative h vs 2 cos x − x sin x": f"max |diff| = {err_h:.2e}",
        "with retain_graph=True instead": f"g has no graph (requires_grad={g2.requires_grad}); the original "
        f"graph keeps its {sum(r.status is Status.LIVE for r in tr_y2.residuals)} residuals, "
        f"but nothing recorded how g was computed",
    }
    return ScenarioResult(
        "create_graph", str(dev), facts,
        values={"g_nodes": len(tr_g.nodes), "g_residuals": len(tr_g.residuals), "err_g": err_g, "err_h": err_h,
                "retain_requires_grad": g2.requires_grad,
                "retained_live": sum(r.status is Status.LIVE for r in tr_y2.residuals)},
        traces={"g": tr_g, "y_retained": tr_y2},
    )
