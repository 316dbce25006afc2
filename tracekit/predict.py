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
