"""`Trace.predict_backward()`'s view: the predicted reverse steps and free points (predict.py
works them out from the record) as `Step` views, tables and text."""

from __future__ import annotations

from ..lifetimes import OUTSIDE, PREDICTED, RETAINED, Lifetimes, storage_holder
from ..predict import predict_lifetimes
from ..reader import Residual, Step, Storage, TraceData
from ..storage import format_bytes
from .table import Table


class Prediction:
    """Predicted reverse steps and free points (nothing run): `steps`, `lifetimes`, `released_at`,
    `freed_at`, `held_by`; the same before and after an observed backward."""

    def __init__(self, trace: TraceData, lifetimes: Lifetimes) -> None:
        self.trace = trace
        self.lifetimes = lifetimes
        self.retained = lifetimes.retained
        d = trace._data
        self.steps = [Step(d, lifetimes, k) for k in range(len(lifetimes.order))]
        self.released_at: dict[Residual, int] = {r: s.index for s in self.steps for r in s.released}
        self.freed_at: dict[Storage, int] = {st: s.index for s in self.steps for st in s.freed}

    def held_by(self, storage: Storage) -> str | None:
        """What still holds this storage after backward (predicted), or None if it is freed."""
        if self.retained:
            return RETAINED
        return None if storage in self.freed_at else (storage_holder(self.trace.record, storage.index) or OUTSIDE)

    def free_point(self, r: Residual) -> str:
        """The predicted lifetime in words, e.g. `released after step 3; freed after step 5 (predicted)`."""
        return self.lifetimes.residuals[r.index].words()

    def table(self) -> Table:
        """Every residual with its predicted free point."""
        rows = [(r.label, "?" if r.shape is None else str(tuple(r.shape)), format_bytes(r.pinned_nbytes or 0),
                 self.free_point(r)) for r in self.trace.residuals]
        return Table(("residual", "shape", "pinned", "free point (predicted)"), rows)

    def steps_table(self) -> Table:
        """The predicted reverse order: each step, what it releases and which storages it frees."""
        rows = [(f"step {s.index}", f"#{s.node.index} {s.node.name}",
                 ", ".join(r.slot for r in s.released) or "-",
                 ", ".join(format_bytes(st.nbytes) for st in s.freed) or "-") for s in self.steps]
        return Table(("step", "rule", "releases", "frees"), rows)

    def text(self) -> str:
        """The predicted reverse order and free points as plain text."""
        return (f"reverse ({PREDICTED} from the graph's structure, not observed)\n{self.steps_table()}\n"
                f"free points ({PREDICTED})\n{self.table()}")

    __repr__ = text

    def _repr_html_(self) -> str:
        return (f"<p>reverse ({PREDICTED} from the graph's structure, not observed)</p>"
                f"{self.steps_table()._repr_html_()}<p>free points ({PREDICTED})</p>{self.table()._repr_html_()}")


def predicted(trace: TraceData, retain_graph: bool = False) -> Lifetimes:
    """The lifetimes predicted from the trace's structure (cached on the trace without retain_graph)."""
    return predict_lifetimes(trace.record, True) if retain_graph else trace._data.prediction()


def predict_backward(trace: TraceData, retain_graph: bool = False) -> Prediction:
    """The reverse order, release step of each residual and free step of each storage, from structure."""
    return Prediction(trace, predicted(trace, retain_graph))
