"""Observed backward: the real reverse order, when autograd releases each residual,
and when each storage's memory actually goes away."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from . import rules
from .capture import gc_paused
from .errors import NotObservableError
from .model import Residual, Step, Storage, Trace
from .saved import RELEASED, released


def _released_now(gnode: Any, residuals: list[Residual]) -> list[Residual]:
    """Residuals of this node that autograd has dropped since they were traced."""
    live = [r for r in residuals if r.status != RELEASED]
    if not live:
        return []
    gone = set(released(gnode, [r.slot for r in live]))
    return [r for r in live if r.slot in gone]


def _used(step_node: Any, gnode: Any) -> list[Residual]:
    """Residuals the rule reads for the gradients that are needed (all, for undescribed ops)."""
    if not step_node.described:
        return list(step_node.residuals)
    needed = tuple(n is not None for n, _ in gnode.next_functions)
    slots = frozenset(r.slot.split("[")[0] for r in step_node.residuals)
    read = _slots_read(step_node.name, needed, slots)
    return [r for r in step_node.residuals if r.slot.split("[")[0] in read]


@functools.lru_cache(maxsize=4096)
def _slots_read(name: str, needed: tuple[bool, ...], slots: frozenset[str]) -> frozenset[str]:
    table = rules.input_rules(name, len(needed)) or []
    return frozenset(s for (_, formula), need in zip(table, needed) if need for s in rules.slots_read(formula, slots))


def _held_by(storage: Storage, retained: bool) -> str:
    if retained:
        return "the retained graph (retain_graph=True)"
    name = storage.names[0] if storage.names else None
    if storage.is_parameter:
        word = storage.leaf_role.value if storage.leaf_role is not None else "parameter"
        return f"{word} {name}" if name else f"a leaf ({word})"
    if storage.is_output:
        return f"output {name} (a live tensor)" if name else "the traced output (a live tensor)"
    if name:
        return f"user variable {name}"
    return "a live reference outside this graph (another graph or a Python object)"


def observe_backward(
    trace: Trace, gradient: Any, retain_graph: bool | None, create_graph: bool,
    on_step: Callable[[Step], None] | None = None,
) -> None:
    """Run torch.autograd.backward on the trace's outputs, recording steps into the trace."""
    if trace.steps:
        raise NotObservableError(
            "this trace already observed a backward pass: call tk.trace(...) again on the "
            "outputs to observe another one (after retain_graph=True)."
        )
    keep = create_graph if retain_graph is None else retain_graph
    by_graph_node = {g: n for g, n in zip(trace._graph_nodes, trace.nodes)}
    pending: dict[tuple[str, int], Storage] = {}
    steps: list[Step] = []

    def settle() -> None:
        """Record what the previous step released and which storages died since."""
        if not steps:
            return
        step = steps[-1]
        if not keep:
            step.released = _released_now(gnode_of[step.index], step.node.residuals)
            for r in step.released:
                r.status = RELEASED
                r.released_at = step.index
                storage = r.storage
                # watch a storage once the graph lets go of it entirely; parameters and the
                # outputs (which the trace itself holds) are settled once, after backward
                if (storage is not None and not (storage.is_parameter or storage.is_output)
                        and all(other.status == RELEASED for other in storage.residuals)):
                    pending[storage.key] = storage
        for key, storage in list(pending.items()):
            if storage.expired():
                step.freed.append(storage)
                del pending[key]
                for r in storage.residuals:
                    r.freed_at = step.index

    gnode_of: dict[int, Any] = {}

    def make_hook(gnode: Any) -> Any:
        node = by_graph_node[gnode]

        def before_rule(grad_outputs: Any) -> None:
            settle()
            index = len(steps)
            gnode_of[index] = gnode
            steps.append(Step(index, node, _used(node, gnode)))
            if on_step is not None:
                on_step(steps[-1])

        return before_rule

    with gc_paused():
        handles = [g.register_prehook(make_hook(g)) for g in trace._graph_nodes]
    trace.steps = steps
    trace.retained = keep
    try:
        torch.autograd.backward(trace._outputs, grad_tensors=gradient, retain_graph=keep, create_graph=create_graph)
    except Exception as err:
        trace.error = str(err)
        raise
    finally:
        for h in handles:
            h.remove()
        settle()
        for storage in trace.storages:
            if not storage.expired():
                for r in storage.residuals:
                    r.held_by = _held_by(storage, keep)
            elif storage.residuals[0].freed_at is None and steps:  # died after the last step we watched
                for r in storage.residuals:
                    r.freed_at = steps[-1].index
