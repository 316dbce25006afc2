"""A memory budget for one training step: categories over the step's timeline, and the
peak from overlapping lifetimes (not the sum of each category's own peak)."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .capture import trace
from .memory import Measurement, check_device, measure
from .render.table import _aligned
from .storage import allocated_bytes, format_bytes, storage_key

CATEGORIES = (
    "parameters", "gradients", "optimizer state", "saved activations",
    "application references", "temporary workspaces", "allocator reserve",
)


@dataclass
class Moment:
    """The bytes of each category at one point of the step."""

    label: str
    bytes: dict[str, int]
    live: int  # measured bytes allocated (all categories but the reserve)


@dataclass
class Budget:
    """One training step's memory: a timeline of moments, the peak and its breakdown."""

    device: str
    timeline: list[Moment]
    peak: int  # measured peak of allocated bytes during the step
    peak_moment: str  # the moment the peak belongs to
    at_peak: dict[str, int]  # breakdown at the peak moment (workspace: peak minus the known categories)
    own_peaks: dict[str, int]  # each category's own highest value, whenever it happened
    source: str
    measurement: Measurement | None = field(default=None, repr=False)

    @property
    def naive_sum(self) -> int:
        """Sum of each category's own peak: what adding up separate measurements would claim."""
        return sum(v for k, v in self.own_peaks.items() if k != "allocator reserve")

    def table_rows(self) -> list[tuple[str, str, str]]:
        """(category, bytes at the peak moment, the category's own peak)."""
        rows = [(c, format_bytes(self.at_peak.get(c, 0)), format_bytes(self.own_peaks.get(c, 0))) for c in CATEGORIES]
        rows.append(("total allocated", format_bytes(self.peak), format_bytes(self.naive_sum)))
        return rows

    def text(self) -> str:
        """The breakdown table and the two totals, in words."""
        head = (f"training-step budget on {self.device}: peak {format_bytes(self.peak)} at '{self.peak_moment}' "
                f"(measured; {self.source})\nnaive sum of each category's own peak: {format_bytes(self.naive_sum)} "
                f"({self.naive_sum / max(self.peak, 1):.2f}× the real peak)")
        return head + "\n" + _aligned(("category", "at the peak", "own peak"), self.table_rows(), "  ")

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self.table_rows()
        )
        caption = html.escape(self.text().splitlines()[0])
        return (f"<table><caption>{caption}</caption><thead><tr><th>category</th><th>at the peak</th>"
                f"<th>own peak</th></tr></thead><tbody>{body}</tbody></table>")

    def figure(self) -> Any:
        """Stacked categories over the step's moments, the measured live bytes and the peak."""
        from .render.figures import budget_figure

        return budget_figure(self)


def _bytes(tensors: Iterable[torch.Tensor | None], device: str, seen: set[Any] | None = None) -> int:
    """Distinct storage bytes of the tensors (as the allocator counts them)."""
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        if t is None or t.layout != torch.strided:
            continue
        key = storage_key(t)
        if key not in seen:
            seen.add(key)
            total += allocated_bytes(t.untyped_storage().nbytes(), device)
    return total


def default_setup(device: str | torch.device = "cpu") -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """A small MLP, Adam and a batch: what `budget()` measures when given nothing."""
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = torch.randn(512, 256, generator=gen).to(device)
    return model, optimizer, batch


def budget(
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    batch: torch.Tensor | None = None,
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    device: str = "cpu",
) -> Budget:
    """Measure one steady-state training step (after a warm-up step) and break its memory down."""
    dev = check_device(device)
    d = str(dev)
    if model is None or optimizer is None or batch is None:
        model, optimizer, batch = default_setup(dev)
    loss_fn = loss_fn or (lambda out: out.pow(2).mean())
    params = [p for p in model.parameters()]

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(batch))
        loss.backward()
        optimizer.step()
        return loss

    step()  # warm-up: the optimizer creates its state on the first step
    optimizer.zero_grad(set_to_none=True)
    moments: list[tuple[str, dict[str, int]]] = []
    held: dict[str, list[torch.Tensor]] = {"refs": [batch]}
    residuals: list[Any] = []

    def known() -> dict[str, int]:
        seen: set[Any] = set()
        state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        return {
            "parameters": _bytes(params, d, seen),
            "gradients": _bytes((p.grad for p in params), d, seen),
            "optimizer state": _bytes(state, d, seen),
            "saved activations": sum(allocated_bytes(s.nbytes, d) for s in residuals if not s.expired()),
            "application references": _bytes(held["refs"], d, seen),
        }

    def moment(label: str) -> None:
        probe.mark(label)
        moments.append((label, known()))

    start = known()
    with measure(dev) as probe:
        moment("start")
        out = model(batch)
        loss = loss_fn(out)
        held["refs"] = [batch, out, loss]
        tr = trace(loss)
        residuals[:] = tr.graph_owned_storages()
        residuals[:] = [s for s in residuals if not any(s.key == storage_key(t) for t in held["refs"])]
        moment("after forward")
        tr.backward(on_step=lambda s: moment(f"backward step {s.index}: {s.node.name}"))
        del tr
        moment("after backward")
        optimizer.step()
        moment("after optimizer step")
        del out, loss
        held["refs"] = [batch]
        moment("end")
    m = probe.result
    # CUDA's allocator knows the absolute bytes; the CPU profiler sees changes from the start,
    # so the CPU start is the known categories at that moment
    base = m.start if dev.type == "cuda" else sum(start.values())
    timeline = []
    for label, cats in moments:
        live = base + m.marks[label]
        cats = dict(cats)
        cats["temporary workspaces"] = max(0, live - sum(cats.values()))
        reserved = m.reserved_marks.get(label)
        cats["allocator reserve"] = max(0, reserved - live) if reserved is not None else 0
        timeline.append(Moment(label, cats, live))
    peak = base + m.peak
    if m.peak_after is not None:
        peak_moment = next(t for t in timeline if t.label == m.peak_after)
    else:
        peak_moment = max(timeline, key=lambda t: t.live)
    at_peak = dict(peak_moment.bytes)
    known_at_peak = sum(v for k, v in at_peak.items() if k not in ("temporary workspaces", "allocator reserve"))
    at_peak["temporary workspaces"] = max(0, peak - known_at_peak)
    own = {c: max(t.bytes.get(c, 0) for t in timeline) for c in CATEGORIES}
    own["temporary workspaces"] = max(own["temporary workspaces"], at_peak["temporary workspaces"])
    return Budget(d, timeline, peak, peak_moment.label, at_peak, own, m.source, m)
