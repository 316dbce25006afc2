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
from dataclasses import dataclass, field

from .model import HeldIn, Node, Residual, Status, Storage, Trace
from .render.table import Table
from .storage import format_bytes

PREDICTED = "predicted"

@dataclass(eq=False)
class PredictedStep:
    """One reverse rule in the predicted order, with what it releases and frees."""

    index: int
    node: Node
    released: list[Residual] = field(default_factory=list)
    freed: list[Storage] = field(default_factory=list)


def reverse_order(trace: Trace) -> list[Node]:
    """The order autograd's engine runs the trace's rules in, from the graph alone: a rule is
    ready once every rule that feeds it a gradient has run; among ready rules the one whose
    forward op ran last goes first (the engine's priority by sequence number, one device)."""
    nodes = trace.nodes
    waiting = [0] * len(nodes)
    for node in nodes:
        for i in node.input_nodes:
            waiting[i] += 1
    position = {g: i for i, g in enumerate(trace._graph_nodes)}
    roots = [position[t.grad_fn] for t in trace._outputs if t.grad_fn in position]
    for r in roots:
        waiting[r] += 1  # the engine's graph root feeds each output
    ready: list[int] = []
    for r in roots:
        waiting[r] -= 1
        if waiting[r] == 0:
            heapq.heappush(ready, -r)
    order: list[Node] = []
    while ready:
        node = nodes[-heapq.heappop(ready)]
        order.append(node)
        for i in node.input_nodes:
            waiting[i] -= 1
            if waiting[i] == 0:
                heapq.heappush(ready, -i)
    return order


def _holder(storage: Storage) -> str | None:
    """What keeps a storage alive after backward, from what the trace knows (None: nothing)."""
    name = storage.names[0] if storage.names else None
    if storage.is_parameter:
        return f"parameter {name}" if name else "a parameter or input leaf"
    if storage.is_output:
        return f"output {name}" if name else "the traced output"
    if name:
        return f"user variable {name}"
    return None


class Prediction:
    """Predicted reverse steps and free points (nothing run): `steps`, `released_at`, `freed_at`, `held_by`."""

    def __init__(self, trace: Trace, steps: list[PredictedStep], retained: bool) -> None:
        self.trace = trace
        self.steps = steps
        self.retained = retained
        self.released_at: dict[Residual, int] = {r: s.index for s in steps for r in s.released}
        self.freed_at: dict[Storage, int] = {st: s.index for s in steps for st in s.freed}

    def held_by(self, storage: Storage) -> str | None:
        """What still holds this storage after backward (predicted), or None if it is freed."""
        if self.retained:
            return "the retained graph (retain_graph=True)"
        return None if storage in self.freed_at else (_holder(storage) or "something outside the graph")

    def free_point(self, r: Residual) -> str:
        """The predicted lifetime in words, e.g. `released after step 3; freed after step 5 (predicted)`."""
        if r.place is HeldIn.RECOMPUTED:
            return "not kept: recomputed in backward"
        parts = []
        if r in self.released_at:
            parts.append(f"released after step {self.released_at[r]}")
        if r.storage is not None:
            if r.storage in self.freed_at:
                parts.append(f"freed after step {self.freed_at[r.storage]}")
            else:
                parts.append(f"held by {self.held_by(r.storage)}")
        return "; ".join(parts) + f" ({PREDICTED})" if parts else f"kept by the retained graph ({PREDICTED})"

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


def _live_before(r: Residual) -> bool:
    """Whether the residual was live before the observed backward, if one ran (the prediction
    is of the backward from the traced state)."""
    return r.status is Status.LIVE or (r.status is Status.RELEASED and r.released_at is not None)


def predict_backward(trace: Trace, retain_graph: bool = False) -> Prediction:
    """The reverse order, release step of each residual and free step of each storage, from structure."""
    order = reverse_order(trace)
    steps = [PredictedStep(i, node) for i, node in enumerate(order)]
    if retain_graph:
        return Prediction(trace, steps, True)
    step_of = {node: s for node, s in zip(order, steps)}
    last: dict[Storage, PredictedStep] = {}
    for s in steps:
        s.released = [r for r in s.node.residuals if _live_before(r) and r.place is not HeldIn.RECOMPUTED]
        for r in s.released:
            if r.storage is not None:
                last[r.storage] = s
    for storage in trace.storages:
        if _holder(storage) is not None or storage not in last:
            continue
        if any(not _live_before(r) or r.node not in step_of for r in storage.residuals):
            continue
        last[storage].freed.append(storage)
    return Prediction(trace, steps, False)
