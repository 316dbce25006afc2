"""Scenario 1: a second backward without retention fails; a graph whose rules saved nothing does not."""

from __future__ import annotations

import torch

from ..capture import capture, trace
from ..memory import check_device
from ..results import ScenarioResult
from .common import N, error_of
from .programs import exp_times

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def repeated_backward(device: str = "cpu") -> ScenarioResult:
    """Backward twice without retention fails; a graph whose rules saved nothing does not."""
    dev = check_device(device)
    a = torch.linspace(-1, 1, N, device=dev, requires_grad=True)
    with capture() as cap:
        y = exp_times(a)
    tr = cap.trace(y)
    tr.backward()
    error = error_of(lambda: y.backward())
    released = [r for r in tr.residuals if r.released_at is not None]
    failing = next(s for s in tr.steps if any(r in released for r in s.used))

    b = torch.zeros(N, device=dev, requires_grad=True)
    y2 = (a.detach() + b).sum()
    tr2 = trace(y2)
    y2.backward()
    again = error_of(lambda: y2.backward())
    facts = {
        "program": "y = (a.exp() * a).sum(); y.backward(); y.backward()",
        "second backward": f"RuntimeError: {error}",
        "released before it": "; ".join(f"{r.label} after step {r.released_at}" for r in released),
        "first rule to need one": f"step {failing.index}: {failing.node.name} reads "
        f"{', '.join(r.slot for r in failing.used)}",
        "graph whose rules saved nothing": f"y2 = (a.detach() + b).sum(): {len(tr2.residuals)} residuals",
        "its second backward": ("ok" if again is None else f"RuntimeError: {again}")
        + " (an implementation detail of torch 2.13, not the documented contract: use retain_graph=True)",
        "b.grad after two backwards": f"{b.grad.unique().tolist()} (1 per backward, accumulated)",
    }
    return ScenarioResult(
        "repeated_backward", str(dev), facts, error=error,
        values={"released": [(r.label, r.released_at) for r in released], "failing_step": failing.index,
                "no_residual_count": len(tr2.residuals), "second_ok": again is None,
                "b_grad": b.grad.unique().tolist()},
        traces={"y": tr, "y2": tr2},
    )
