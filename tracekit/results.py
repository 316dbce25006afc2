"""Scenario results and side-by-side comparison across devices."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .memory import NO_CUDA, DeviceUnavailableError, Measurement
from .render.table import aligned, html_table
from .trace import Trace


@dataclass(repr=False)
class ScenarioResult:
    """What one scenario did on one device: facts to read, numbers to check, traces, measurements."""

    scenario: str
    device: str
    facts: dict[str, str]  # the rows shown by text() and compare(), in order
    values: dict[str, Any] = field(default_factory=dict)  # raw numbers, for tests and notebooks
    traces: dict[str, Trace] = field(default_factory=dict, repr=False)
    measurements: dict[str, Measurement] = field(default_factory=dict, repr=False)
    error: str | None = None  # PyTorch's error message, verbatim, when the scenario shows one
    plot: Callable[[ScenarioResult], Any] | None = field(default=None, repr=False)

    def text(self) -> str:
        """The facts as an aligned two-column table."""
        return f"{self.scenario} on {self.device}\n" + aligned(("fact", "value"), list(self.facts.items()), "  ")

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return html_table(("", self.device), list(self.facts.items()), f"{self.scenario} on {self.device}",
                          row_headers=True)

    def figure(self) -> Any:
        """A matplotlib figure of the measured memory, where the scenario has one."""
        if self.plot is None:
            raise ValueError(f"scenario {self.scenario!r} reads best as a table: it has no figure")
        return self.plot(self)


@dataclass
class Comparison:
    """One scenario on several devices: one row per fact, one column per device."""

    scenario: str
    devices: tuple[str, ...]
    results: dict[str, ScenarioResult | None]  # None: the device is not available here

    def rows(self) -> list[tuple[str, tuple[str, ...]]]:
        """(fact, value per device); an absent device's column holds one fixed sentence."""
        names: list[str] = []
        for res in self.results.values():
            for k in res.facts if res else ():
                if k not in names:
                    names.append(k)
        out = []
        for i, name in enumerate(names):
            cells = []
            for dev in self.devices:
                res = self.results[dev]
                if res is None:
                    cells.append(NO_CUDA if i == 0 else "")
                else:
                    cells.append(res.facts.get(name, "-"))
            out.append((name, tuple(cells)))
        return out

    def text(self) -> str:
        """The comparison as plain text: each fact, then its value on each device."""
        lines = [f"{self.scenario}: " + " | ".join(self.devices)]
        for name, cells in self.rows():
            lines.append(f"{name}")
            for dev, cell in zip(self.devices, cells):
                if cell:
                    lines.append(f"  {dev:<5} {cell}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = [(name, *cells) for name, cells in self.rows()]
        return html_table(("", *self.devices), rows, self.scenario, row_headers=True)


def compare(
    scenario: Callable[..., ScenarioResult], devices: Sequence[str] = ("cpu", "cuda"), **kwargs: Any
) -> Comparison:
    """Run a scenario on each device and line the results up, one column per device."""
    results: dict[str, ScenarioResult | None] = {}
    name = getattr(scenario, "__name__", str(scenario))
    for dev in devices:
        try:
            results[dev] = scenario(device=dev, **kwargs)
        except DeviceUnavailableError:
            results[dev] = None
    return Comparison(name, tuple(devices), results)
