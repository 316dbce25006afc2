"""`Trace`: the record's data (reader.TraceData) with the live handle on the graph, and the
methods a user calls. Each method hands the data to a function of one view or producer
(observe, predict, render/, trace_format); none of them imports this module."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import trace_format
from .errors import GraphReleasedError
from .lifetimes import Lifetimes
from .live import Live
from .observe import observe_backward
from .reader import Step, TraceData
from .render.dot import WIDTH, trace_graph
from .render.overview import module_graph, overview_graph, wants_overview
from .render.prediction import Prediction, predict_backward
from .render.svg import render_svg, scrolling_html
from .render.table import Table, module_table, residual_table, trace_text
from .render.timeline import timeline_figure
from .rows import Record
from .without_data import refuse_without_data

if TYPE_CHECKING:
    import graphviz
    import torch


class Trace(TraceData):
    """The forward/reverse trace of a graph: the record (nodes, residuals, storages), its
    lifetimes (predicted, and observed once backward ran) and a live handle on the graph that
    is no holder: it keeps nothing alive that the caller let go of."""

    def __init__(self, record: Record, live: Live | None = None, observed: Lifetimes | None = None,
                 weaks: tuple[int, ...] | None = None) -> None:
        super().__init__(record, observed, weaks)
        self._live = live

    @classmethod
    def _restore(cls, record: Record, observed: Lifetimes | None) -> Trace:
        return cls(record, None, observed)

    def __reduce__(self) -> tuple[Any, ...]:
        trace_format.check_savable(self.record)
        return (Trace._restore, (self.record, self._data.observed))

    @property
    def _outputs(self) -> tuple[torch.Tensor, ...]:
        """The traced outputs, while the caller holds them (GraphReleasedError once let go)."""
        return self._handle().tensors()

    @property
    def _graph_nodes(self) -> list[Any]:
        """The graph's nodes in forward order, walked again from the live outputs."""
        return self._handle().graph_nodes(self.record)

    def _handle(self) -> Live:
        if self._live is None:
            raise GraphReleasedError(
                "this trace was loaded from a file (or unpickled): it is a record without a graph, so "
                "it cannot run backward. Trace the program again to observe a backward pass.")
        return self._live

    def backward(
        self,
        gradient: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        on_step: Callable[[Step], None] | None = None,
    ) -> Trace:
        """Run backward on the real graph, recording the reverse order and free points.

        `on_step(step)` is called as each reverse rule is about to run (after the previous
        step's releases and frees were recorded). Raises GraphReleasedError when the caller
        no longer holds the traced outputs (the graph is gone, as in plain PyTorch)."""
        refuse_without_data(self)
        observe_backward(self, self._handle(), gradient, retain_graph, create_graph, on_step)
        return self

    def draw(self, max_nodes: int = 60, width: int = 840) -> graphviz.Digraph:
        """The trace as a graphviz drawing laid out for a place `width` px wide, at full size (text
        never scaled down): reverse rules above the forward ops they reverse, residual edges with
        the bytes they pin, a lifetime strip and a legend (long traces fold and collapse)."""
        return trace_graph(self, max_nodes=max_nodes, width=width)

    def svg(self, max_nodes: int = 60, width: int = 840) -> str:
        """The drawing rendered to SVG (system `dot` if present, else the bundled renderer)."""
        return render_svg(self.draw(max_nodes=max_nodes, width=width).source)

    def table(self, sort: str = "forward", top: int | None = None) -> Table:
        """The residuals as a table (HTML in Jupyter, text in a terminal). `sort="bytes"`: most
        bytes only the graph keeps first (`"pinned"`: most bytes pinned); `top`: that many rows."""
        return residual_table(self, sort, top)

    def by_module(self) -> Table:
        """Residuals per module of the captured model: how many, the bytes only the graph keeps
        for them, what else they pin, and the steps that free them (observed, else predicted)."""
        return module_table(self)

    def text(self) -> str:
        """Plain text with the same facts as the drawing."""
        return trace_text(self)

    def to_json(self, path: str | None = None) -> str:
        """The record (and the observed lifetimes, if any) as versioned JSON (docs/trace-format.md);
        written to `path` when given. tk.load_trace reads it back."""
        return trace_format.dump(self.record, self._data.observed, path)

    def timeline(self) -> Any:
        """A matplotlib figure: bytes the residuals keep alive as each reverse step starts, stacked
        by residual (the largest named), predicted and (after backward) observed, the peak marked."""
        return timeline_figure(self)

    def predict_backward(self, retain_graph: bool = False) -> Prediction:
        """The reverse order and free points predicted from the graph's structure (no backward run;
        the same before and after one)."""
        return predict_backward(self, retain_graph)

    def __repr__(self) -> str:
        return self.text()

    def overview(self) -> graphviz.Source:
        """A model's first picture, at full size: its modules as boxes (ops, residuals, bytes only
        the graph keeps, free steps), repeated blocks drawn once with their count."""
        return overview_graph(self)

    def draw_module(self, path: str) -> graphviz.Source:
        """One module's full drawing (`"transformer.h.0.attn"`, a path from `tr.by_module()`): its
        ops and each residual with its bytes and free point."""
        return module_graph(self, path)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        bundle = {"text/plain": self.text()}
        try:  # a captured model too big for one drawing shows its overview first
            big = wants_overview(self)
            bundle["image/svg+xml"] = svg = render_svg(self.overview().source) if big else self.svg()
            wide = scrolling_html(svg, WIDTH)  # wider than a cell: full size in a box that scrolls sideways
            if wide is not None:
                bundle["text/html"] = wide
        except Exception as err:  # a drawing problem must never hide the facts
            bundle["text/plain"] += f"\n(drawing unavailable: {err})"
        return bundle


def load_trace(source: str | Path) -> Trace:
    """A trace from a JSON file written by `tr.to_json(path)` (or from the JSON text itself): a
    record without a graph (it renders, compares and predicts; backward raises GraphReleasedError)."""
    record, observed = trace_format.load(source)
    return Trace(record, None, observed)
