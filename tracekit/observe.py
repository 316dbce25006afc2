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
from .saved import RELEASED, is_custom_function


def _used(step_node: Any, gnode: Any) -> list[Residual]:
    """Residuals the rule reads for the gradients that are needed (all, for undescribed ops)."""
    if not step_node.residuals:
        return []
    if not step_node.described:
        return list(step_node.residuals)
    needed = tuple(n is not None for n, _ in gnode.next_functions)
    read = _named_slots_read(step_node.name, needed, tuple(r.slot for r in step_node.residuals))
    return [r for r in step_node.residuals if r.slot in read]


@functools.lru_cache(maxsize=4096)
def _named_slots_read(name: str, needed: tuple[bool, ...], slots: tuple[str, ...]) -> frozenset[str]:
    """The slots (`self`, `tensors[1]`, ...) read for these needed gradients (cached per op kind)."""
    read = _slots_read(name, needed, frozenset(s.split("[")[0] for s in slots))
    return frozenset(s for s in slots if s.split("[")[0] in read)


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


def _probe_of(gnode: Any, residuals: list[Residual]) -> tuple[str, int | None] | None:
    """How to ask autograd whether this node's saved values are gone: one slot stands for all
    (a node releases every saved value at once, right after its rule ran)."""
    if is_custom_function(gnode):
        return ("_raw_saved_tensors", None)
    name, _, index = residuals[0].slot.partition("[")
    return ("_raw_saved_" + name, int(index.rstrip("]")) if index else None)


def _is_released(gnode: Any, probe: tuple[str, int | None]) -> bool:
    """Read one raw saved slot without unpacking it: None data (or PyTorch refusing) means released."""
    attr, index = probe
    try:
        raw = getattr(gnode, attr)
        if index is not None:
            raw = raw[index]
        if attr == "_raw_saved_tensors":
            return False  # a custom Function's saved tensors raise once released
        return raw is not None and raw.data is None
    except (RuntimeError, IndexError):  # "saved tensors ... have already been freed"
        return True


def observe_backward(
    trace: Trace, gradient: Any, retain_graph: bool | None, create_graph: bool,
    on_step: Callable[[Step], None] | None = None,
) -> None:
    """Run torch.autograd.backward on the trace's outputs, recording steps into the trace.

    One Python hook serves the whole backward: every traced node gets the same tensor pre-hook
    (a shared hook dict, so registering costs no Python call per node), and the hook asks the
    engine which node is about to run. Before recording that node it settles the previous
    step: whether autograd released that node's saved values (one raw slot read, nothing
    unpacked) and which watched storages died since."""
    if trace.steps:
        raise NotObservableError(
            "this trace already observed a backward pass: call tk.trace(...) again on the "
            "outputs to observe another one (after retain_graph=True)."
        )
    keep = create_graph if retain_graph is None else retain_graph
    graph_nodes, nodes = trace._graph_nodes, trace.nodes
    steps: list[Step] = []
    pending: list[tuple[Storage, int]] = []  # storages the graph let go of, not yet freed (with their cdata)
    unreleased: dict[Storage, int] = {}  # storage -> its residuals autograd still holds
    live: dict[int, list[Residual]] = {}  # node index -> residuals not yet released
    probes: dict[int, tuple[str, int | None]] = {}
    with gc_paused():
        index_of = {g: i for i, g in enumerate(graph_nodes)}
        if not keep:
            for i, node in enumerate(nodes):
                held = [r for r in node.residuals if r.status != RELEASED]
                if held:
                    live[i], probes[i] = held, _probe_of(graph_nodes[i], held)
                    for r in held:
                        if r.storage is not None:
                            unreleased[r.storage] = unreleased.get(r.storage, 0) + 1
    expired = torch.UntypedStorage._expired
    order: list[int] = []

    def settle() -> None:
        """Record what the previous step released and which storages died since."""
        step = steps[-1]
        i = order[-1]
        held = live.get(i)
        if held is not None and _is_released(graph_nodes[i], probes[i]):
            del live[i]
            step.released = held
            for r in held:
                r.status = RELEASED
                r.released_at = step.index
                storage = r.storage
                if storage is None:
                    continue
                left = unreleased[storage] = unreleased[storage] - 1
                # watch a storage once the graph lets go of it entirely; parameters and the
                # outputs (which the trace itself holds) are settled once, after backward
                if left == 0 and not (storage.is_parameter or storage.is_output) and storage.weak is not None:
                    pending.append((storage, storage.weak.cdata))
        if pending:
            still = []
            for storage, cdata in pending:
                if expired(cdata):
                    step.freed.append(storage)
                    for r in storage.residuals:
                        r.freed_at = step.index
                else:
                    still.append((storage, cdata))
            pending[:] = still

    current_node = torch._C._current_autograd_node

    def before_rule(_grad: Any) -> None:
        i = index_of.get(current_node())
        if i is None:  # a node outside this trace (cannot happen for the engine's own task)
            return
        if steps:
            settle()
        order.append(i)
        node = nodes[i]
        steps.append(Step(len(steps), node, _used(node, graph_nodes[i])))
        if on_step is not None:
            on_step(steps[-1])

    hooks: dict[int, Callable[[Any], None]] = {0: before_rule}
    carrier = torch.empty(0)
    carrier._backward_hooks = hooks  # the dict every node's tensor pre-hook reads (PyTorch's own mechanism)
    with gc_paused():
        for g in graph_nodes:
            g._register_hook_dict(carrier)
    trace.steps = steps
    trace.retained = keep
    try:
        with gc_paused():
            torch.autograd.backward(trace._outputs, grad_tensors=gradient, retain_graph=keep,
                                    create_graph=create_graph)
    except Exception as err:
        trace.error = str(err)
        raise
    finally:
        hooks.clear()  # the nodes keep an empty hook dict: a later backward calls nothing of ours
        if steps:
            settle()
        for storage in trace.storages:
            if not storage.expired():
                for r in storage.residuals:
                    r.held_by = _held_by(storage, keep)
            elif storage.residuals[0].freed_at is None and steps:  # died after the last step we watched
                for r in storage.residuals:
                    r.freed_at = steps[-1].index
