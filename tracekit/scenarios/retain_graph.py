"""Scenario 2: retain_graph=True keeps every residual until the graph is dropped, measured."""

from __future__ import annotations

import torch

from ..capture import trace
from ..memory import check_device, measure
from ..results import ScenarioResult
from ..rows import Status
from ..storage import allocated_bytes, format_exact
from .common import N, error_of, predicted
from .programs import exp_times

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def retain_graph(device: str = "cpu") -> ScenarioResult:
    """retain_graph=True keeps every residual until the graph is dropped; measured."""
    dev = check_device(device)
    a = torch.linspace(-1, 1, N, device=dev, requires_grad=True)
    with measure(dev) as probe:
        y = exp_times(a)
        probe.mark("after forward")
        tr = trace(y)
        tr.backward(retain_graph=True)
        first = a.grad.clone()
        probe.mark("after backward (retained)")
        second_error = error_of(y.backward, retain_graph=True)
        probe.mark("after second backward")
        prediction = predicted(tr.graph_owned_storages(), str(dev)) + allocated_bytes(y.nbytes, str(dev))
        live_residuals = sum(r.status is Status.LIVE for r in tr.residuals)
        del tr, y
        probe.mark("after dropping the graph")
    m = probe.result
    freed = m.marks["after second backward"] - m.marks["after dropping the graph"]
    facts = {
        "program": "y = (a.exp() * a).sum(); y.backward(retain_graph=True) twice; del y",
        "second backward": "ok" if second_error is None else f"RuntimeError: {second_error}",
        "a.grad after both": "2 × the first gradient" if torch.equal(a.grad, 2 * first) else "different",
        "residuals still live after both backwards": str(live_residuals),
        "freed when the graph is dropped (measured)": format_exact(freed),
        "predicted from residual storages + output": format_exact(prediction),
        "measured by": m.source,
    }
    return ScenarioResult(
        "retain_graph", str(dev), facts,
        values={"freed_on_drop": freed, "predicted": prediction, "live_residuals": live_residuals,
                "second_ok": second_error is None, "grad_doubled": torch.equal(a.grad, 2 * first)},
        measurements={"retain": m},
    )
