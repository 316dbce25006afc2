"""Predictions from a trace's structure, for graphs whose backward cannot be observed
(meta or fake tensors: shapes, no values) or has not been run yet.

- `predict_backward(trace)`: the reverse order autograd's engine takes (a node runs once every
  consumer has sent its gradient; among ready nodes the one created last runs first), the
  step after which each residual is released (when its own rule has run), and the step
  after which each storage is freed (when the last rule reading it has run, unless a
  parameter, an output or a named variable still holds it). Every figure is marked predicted.
(What a trace without data cannot know, and the notes on its nodes: without_data.py.)
"""

from __future__ import annotations

import heapq

from .lifetimes import GONE, OUTSIDE, PREDICTED, RECOMPUTED, RETAINED, Lifetime, Lifetimes, holder
from .model import HeldIn, Record, Residual, Status, Step, Storage, Trace
from .render.table import Table
from .storage import format_bytes

PredictedStep = Step  # a step of the prediction is a Step view over the predicted lifetimes


def reverse_order(record: Record) -> list[int]:
    """The order autograd's engine runs the trace's rules in (node indexes), from the graph alone:
    a rule is ready once every rule that feeds it a gradient has run; among ready rules the one
    whose forward op ran last goes first (the engine's priority by sequence number, one device)."""
    nodes = record.nodes
    waiting = [0] * len(nodes)
    for node in nodes:
        for i in node.inputs:
            if type(i) is int:
                waiting[i] += 1
    roots = [i for i, _ in record.outputs if i is not None]
    for r in roots:
        waiting[r] += 1  # the engine's graph root feeds each output
    ready: list[int] = []
    for r in roots:
        waiting[r] -= 1
        if waiting[r] == 0:
            heapq.heappush(ready, -r)
    order: list[int] = []
    while ready:
        k = -heapq.heappop(ready)
        order.append(k)
        for i in nodes[k].inputs:
            if type(i) is int:
                waiting[i] -= 1
                if waiting[i] == 0:
                    heapq.heappush(ready, -i)
    return order


def fixed_note(record: Record, i: int) -> str | None:
    """The lifetime of residual i when it has no steps to give (recomputed, gone before tracing,
    modified in place), else None: the same for a prediction and an observation."""
    row = record.residuals[i]
    if row.place is HeldIn.RECOMPUTED:
        return RECOMPUTED
    if row.status is Status.RELEASED:
        return GONE
    if row.status is Status.MODIFIED:
        by = ", ".join(str(m) for m in row.modified_by) or "an in-place op"
        return f"modified in place by {by}: saved at version {row.saved_version}, now {row.version}"
    return None


def storage_holder(record: Record, k: int) -> str | None:
    """What keeps storage k alive after backward, from what the record knows (None: nothing)."""
    s = record.storages[k]
    return holder(s.names, s.is_parameter, s.is_output, s.leaf_role.value if s.leaf_role is not None else None)


def predict_lifetimes(record: Record, retain_graph: bool = False) -> Lifetimes:
    """Every residual's lifetime from the graph's structure: released after its own rule runs,
    its storage freed after the last rule reading it ran, unless a parameter, an output or a
    named variable still holds it (or the graph is retained)."""
    order = reverse_order(record)
    step_of = {node: k for k, node in enumerate(order)}
    residuals = record.residuals
    n_steps = len(order)
    if retain_graph:
        lts = tuple(Lifetime(PREDICTED, note=fixed_note(record, i)) if fixed_note(record, i)
                    else Lifetime(PREDICTED, held_by=RETAINED) for i in range(len(residuals)))
        return Lifetimes(PREDICTED, tuple(order), lts, ((),) * n_steps, ((),) * n_steps, True)
    released_at: list[int | None] = [None] * len(residuals)
    released: list[list[int]] = [[] for _ in order]
    for i, row in enumerate(residuals):
        k = step_of.get(row.node)
        if k is not None and row.status is Status.LIVE and row.place is not HeldIn.RECOMPUTED:
            released_at[i] = k
            released[k].append(i)
    freed_at: list[int | None] = [None] * len(record.storages)
    freed: list[list[int]] = [[] for _ in order]
    for j, s in enumerate(record.storages):
        steps = [released_at[i] for i in s.residuals]
        if storage_holder(record, j) is not None or not steps or any(k is None for k in steps):
            continue
        last = max(steps)  # type: ignore[type-var]
        freed_at[j] = last
        freed[last].append(j)
    lts = []
    for i, row in enumerate(residuals):
        note = fixed_note(record, i)
        if note is not None:
            lts.append(Lifetime(PREDICTED, note=note))
            continue
        k = row.storage
        free = freed_at[k] if k is not None else None
        held = None if k is None or free is not None else (storage_holder(record, k) or OUTSIDE)
        lts.append(Lifetime(PREDICTED, released_at[i], free, held))
    return Lifetimes(PREDICTED, tuple(order), tuple(lts), tuple(map(tuple, released)), tuple(map(tuple, freed)))


class Prediction:
    """Predicted reverse steps and free points (nothing run): `steps`, `lifetimes`, `released_at`,
    `freed_at`, `held_by`; the same before and after an observed backward."""

    def __init__(self, trace: Trace, lifetimes: Lifetimes) -> None:
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


def predict_backward(trace: Trace, retain_graph: bool = False) -> Prediction:
    """The reverse order, release step of each residual and free step of each storage, from structure."""
    if not retain_graph:
        return Prediction(trace, trace._data.prediction())
    return Prediction(trace, predict_lifetimes(trace.record, True))
