"""Predictions from a trace's structure, for graphs whose backward cannot be observed
(meta or fake tensors: shapes, no values) or has not been run yet.

- `predict_lifetimes(record)`: the reverse order autograd's engine takes (a node runs once every
  consumer has sent its gradient; among ready nodes the one created last runs first), the
  step after which each residual is released (when its own rule has run), and the step
  after which each storage is freed (when the last rule reading it has run, unless a
  parameter, an output or a named variable still holds it). Every figure is marked predicted.
(Its views, `Trace.predict_backward()`'s steps and tables: render/prediction.py.)
(What a trace without data cannot know, and the notes on its nodes: without_data.py.)
"""

from __future__ import annotations

import heapq

from .lifetimes import OUTSIDE, PREDICTED, RETAINED, Lifetime, Lifetimes, fixed_note, storage_holder
from .rows import HeldIn, Record, Status


def reverse_order(record: Record) -> list[int]:
    """The order autograd's engine runs the trace's rules in (node indexes), from the graph alone:
    a rule is ready once every rule that feeds it a gradient has run; among ready rules the one
    whose forward op ran last goes first (the engine's priority by sequence number, one device)."""
    inputs = record.node_columns.inputs
    waiting = [0] * len(inputs)
    for ins in inputs:
        for i in ins:
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
        for i in inputs[k]:
            if type(i) is int:
                waiting[i] -= 1
                if waiting[i] == 0:
                    heapq.heappush(ready, -i)
    return order


def predict_lifetimes(record: Record, retain_graph: bool = False) -> Lifetimes:
    """Every residual's lifetime from the graph's structure: released after its own rule runs,
    its storage freed after the last rule reading it ran, unless a parameter, an output or a
    named variable still holds it (or the graph is retained). The Lifetime of each residual is
    made when first read."""
    order = reverse_order(record)
    step_of = {node: k for k, node in enumerate(order)}
    c = record.residual_columns
    n, n_steps = len(c.node), len(order)
    if retain_graph:
        def retained() -> tuple[Lifetime, ...]:
            notes = [fixed_note(record, i) for i in range(n)]
            return tuple(Lifetime(PREDICTED, note=note) if note else Lifetime(PREDICTED, held_by=RETAINED)
                         for note in notes)
        return Lifetimes(PREDICTED, tuple(order), retained, ((),) * n_steps, ((),) * n_steps, True)
    released_at: list[int | None] = [None] * n
    released: list[list[int]] = [[] for _ in order]
    live, recomputed = Status.LIVE, HeldIn.RECOMPUTED
    for i, (node, status, place) in enumerate(zip(c.node, c.status, c.place)):
        k = step_of.get(node)
        if k is not None and status is live and place is not recomputed:
            released_at[i] = k
            released[k].append(i)
    holders = [storage_holder(record, j) for j in range(record.n_storages)]
    freed_at: list[int | None] = [None] * len(holders)
    freed: list[list[int]] = [[] for _ in order]
    for j, members in enumerate(record.storage_columns.residuals):
        steps = [released_at[i] for i in members]
        if holders[j] is not None or not steps or any(k is None for k in steps):
            continue
        last = max(steps)  # type: ignore[type-var]
        freed_at[j] = last
        freed[last].append(j)

    def lifetimes() -> tuple[Lifetime, ...]:
        lts = []
        for i, k in enumerate(c.storage):
            note = fixed_note(record, i)
            if note is not None:
                lts.append(Lifetime(PREDICTED, note=note))
                continue
            free = freed_at[k] if k is not None else None
            held = None if k is None or free is not None else (holders[k] or OUTSIDE)
            lts.append(Lifetime(PREDICTED, released_at[i], free, held))
        return tuple(lts)

    return Lifetimes(PREDICTED, tuple(order), lifetimes, tuple(map(tuple, released)), tuple(map(tuple, freed)))
