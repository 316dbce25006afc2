"""Scenario 7: keeping a diagnostic with its graph keeps every iteration's graph alive; .item() / .detach() do not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..memory import Measurement, check_device, measure
from ..models import seeded_mlp
from ..render.figures import KIB, figure_and_axes
from ..results import ScenarioResult
from ..storage import format_bytes

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

ITERATIONS = 6


def train_and_log(model: Any, opt: Any, x: Any, x_val: Any, keep: Any, probe: Any, steps: int = 6) -> list:
    """Lesson 6's loop: train, and log a diagnostic each step, kept as keep(val)."""
    history = []
    for i in range(steps):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        val = model(x_val).pow(2).mean()  # a diagnostic, computed with grad enabled
        history.append(keep(val))
        del loss, val
        probe.mark(f"iteration {i}")
    return history


def training_setup(device: str = "cpu") -> tuple[Any, Any, torch.Tensor, torch.Tensor]:
    """Lesson 6's model (128-128-1 MLP, fixed seed), its SGD optimizer, a batch and a validation batch."""
    dev = check_device(device)
    model, gen = seeded_mlp((128, 128, 1), torch.nn.Tanh, scale=0.1, seed=1)
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 128, generator=gen).to(dev)
    x_val = torch.randn(256, 128, generator=gen).to(dev)
    return model, opt, x, x_val


KEEPS: dict[str, Callable[[torch.Tensor], Any]] = {
    "graph": lambda val: val, "detach": lambda val: val.detach(), "item": lambda val: val.item(),
}


def _train(dev: torch.device, keep: str) -> tuple[Measurement, list[torch.Tensor], list[Any]]:
    model, opt, x, x_val = training_setup(str(dev))
    with measure(dev) as probe:
        history = train_and_log(model, opt, x, x_val, KEEPS[keep], probe, steps=ITERATIONS)
    return probe.result, [p.detach().clone() for p in model.parameters()], history


def app_references(device: str = "cpu") -> ScenarioResult:
    """Keeping a diagnostic with its graph keeps every iteration's graph alive; .item() / .detach() do not."""
    dev = check_device(device)
    rows = {}
    params = {}
    measurements = {}
    for keep, label in (("graph", "history.append(val)"), ("detach", "history.append(val.detach())"),
                        ("item", "history.append(val.item())")):
        m, final, _ = _train(dev, keep)
        live = [m.marks[f"iteration {i}"] for i in range(ITERATIONS)]
        rows[label] = {"live": live, "growth": (live[-1] - live[0]) / (ITERATIONS - 1)}
        params[label] = final
        measurements[label] = m
    ref = params["history.append(val.item())"]
    facts = {"loop": f"{ITERATIONS} SGD steps of a 128-128-1 MLP; each logs val = model(x_val).pow(2).mean()"}
    for label, r in rows.items():
        same = all(torch.equal(a, b) for a, b in zip(params[label], ref))
        facts[label] = (f"live bytes grow {format_bytes(int(r['growth']))} per iteration "
                        f"({format_bytes(r['live'][0])} → {format_bytes(r['live'][-1])}); "
                        f"trained parameters {'identical' if same else 'DIFFERENT'}")
    return ScenarioResult("app_references", str(dev), facts, values={"rows": rows},
                          measurements=measurements, plot=references_figure)


def references_figure(result: ScenarioResult) -> Any:
    """Live bytes after each training iteration, per way of keeping the diagnostic."""
    fig, ax = figure_and_axes()
    for label, r in result.values["rows"].items():
        ax.plot(range(len(r["live"])), [b / KIB for b in r["live"]], marker="o", label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel("live KiB (measured)")
    ax.set_title(f"application references on {result.device}")
    ax.legend()
    fig.tight_layout()
    return fig
