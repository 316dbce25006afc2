"""The result of `budget()`: the categories and their definitions, `Moment` (the bytes of each
category at one point of the step), `Budget` (the timeline, the peak and its breakdown, as text,
HTML and a figure), and the labels of the marks and of the points between them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..memory import Measurement
from ..render.table import aligned, html_table
from ..storage import format_bytes

CATEGORIES = (
    "parameters", "gradients", "optimizer state", "saved activations",
    "application references", "temporary workspaces", "unattributed", "allocator reserve",
)
ALLOCATED = CATEGORIES[:-1]  # the categories that add up to the allocated bytes
DEFINITIONS = {
    "parameters": "model parameters and buffers (BatchNorm running statistics included), and anything "
                  "else the optimizer updates",
    "gradients": "the parameters' .grad (zero_grad(set_to_none=True) frees them; set_to_none=False keeps "
                 "zeros)",
    "optimizer state": "optimizer.state (Adam: exp_avg, exp_avg_sq, step per parameter; plain SGD: none)",
    "saved activations": "tensors the autograd graph saved for backward and only the graph holds; "
                         "released rule by rule during backward",
    "application references": "what the caller's code holds: the batch and the step's variables (the loss, "
                              "a kept output); a saved tensor the caller also holds counts here",
    "temporary workspaces": "allocated and freed within the step, held by none of the above: gradients "
                            "flowing between reverse rules, scratch buffers, optimizer intermediates",
    "unattributed": "measured bytes no category explains (no known holder; on CUDA, memory from before "
                    "the step tracekit cannot identify)",
    "allocator reserve": "CUDA: reserved − allocated, cached by the allocator (0 on CPU); not in the "
                         "allocated total",
}


@dataclass
class Moment:
    """The bytes of each category at one point of the step (the categories add up to `live`)."""

    label: str
    bytes: dict[str, int]
    live: int  # measured bytes allocated at this point
    position: int = 0  # allocator events since the start of the step
    peak: bool = False  # the highest point of the measured stream


@dataclass
class Budget:
    """One training step's memory: the measured stream, its moments, the peak and its breakdown."""

    device: str
    timeline: list[Moment]  # every mark of the step, and the peak where it happened
    peak: int  # measured peak of allocated bytes during the step
    peak_moment: str  # the label of the peak moment in the timeline
    at_peak: dict[str, int]  # the breakdown of that moment
    own_peaks: dict[str, int]  # each category's own highest value, whenever it happened
    source: str
    measurement: Measurement | None = field(default=None, repr=False)
    live: list[int] = field(default_factory=list, repr=False)  # measured bytes after each allocator event
    series: dict[str, list[int]] = field(default_factory=dict, repr=False)  # each category, same positions
    notes: dict[str, str] = field(default_factory=dict, repr=False)  # what each category holds here

    @property
    def _how(self) -> str:
        return "predicted" if self.device == "meta" else "measured"

    @property
    def naive_sum(self) -> int:
        """Sum of each category's own peak: what adding up separate measurements would claim."""
        return sum(self.own_peaks.get(c, 0) for c in ALLOCATED)

    def moment(self, label: str) -> Moment:
        """The moment with this label (`KeyError` naming the labels if there is none)."""
        for m in self.timeline:
            if m.label == label:
                return m
        raise KeyError(f"no moment {label!r}; the moments are: {[m.label for m in self.timeline]}")

    def table_rows(self) -> list[tuple[str, ...]]:
        """(category, start, at the peak, end, the category's own peak) in short bytes."""
        start, end = self.timeline[0].bytes, self.timeline[-1].bytes
        rows = [(c, format_bytes(start.get(c, 0)), format_bytes(self.at_peak.get(c, 0)), format_bytes(end.get(c, 0)),
                 format_bytes(self.own_peaks.get(c, 0))) for c in ALLOCATED]
        rows.append((f"total allocated ({self._how})", format_bytes(self.timeline[0].live), format_bytes(self.peak),
                     format_bytes(self.timeline[-1].live), format_bytes(self.naive_sum)))
        reserve = "allocator reserve"
        rows.append((reserve, format_bytes(start.get(reserve, 0)), format_bytes(self.at_peak.get(reserve, 0)),
                     format_bytes(end.get(reserve, 0)), format_bytes(self.own_peaks.get(reserve, 0))))
        return rows

    _HEADER = ("category", "start", "at the peak", "end", "own peak")

    def _head(self) -> list[str]:
        where = self.peak_moment[len("peak, "):] if self.peak_moment.startswith("peak, ") else \
            f"at '{self.peak_moment}'"
        return [
            f"training-step budget on {self.device}: peak {format_bytes(self.peak)}, {where} "
            f"({self._how}; {self.source})",
            f"naive sum of each category's own peak: {format_bytes(self.naive_sum)} "
            f"({self.naive_sum / max(self.peak, 1):.2f}× the real peak)",
        ]

    def text(self) -> str:
        """The head lines, each category's definition, and the table (start, peak, end, own peak)."""
        notes = [f"  {c}: {self.notes.get(c, DEFINITIONS[c])}" for c in CATEGORIES]
        table = aligned(self._HEADER, self.table_rows(), "  ")
        return "\n".join(self._head() + ["categories (each byte counted once):"] + notes) + "\n" + table

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        definitions = [(c, self.notes.get(c, DEFINITIONS[c])) for c in CATEGORIES]
        return html_table(self._HEADER, self.table_rows(), "\n".join(self._head()), definitions=definitions)

    def figure(self) -> Any:
        """The measured stream as stacked categories, the phases, and the peak where it happened."""
        from ..render.figures import budget_figure

        return budget_figure(self, ALLOCATED, _RULE)


_RULE = re.compile(r"(^|: )backward \d+: ")


def _phase(before: str, after: str) -> str:
    """Where a point between two marks is, in words."""
    if _RULE.search(before):
        return f"in {before}"
    if before.endswith("optimizer step begins"):
        return "in the optimizer step"
    if after.endswith("after forward"):
        return f"in {after.removesuffix('after forward')}forward"
    if after.endswith("after zero_grad"):
        return "in zero_grad"
    return f"between '{before}' and '{after}'"


def _labels(marks: list[tuple[str, int]], passes: int, word: str) -> list[str]:
    """Mark labels, with the backward pass they belong to when the step ran more than one."""
    if passes == 1:
        return [label for label, _ in marks]
    return [f"{word} {n}/{passes}: {label}" if n else label for label, n in marks]
