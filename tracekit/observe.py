"""Observed backward: the real reverse order, when autograd releases each residual,
and when each storage's memory actually goes away.

One Python hook serves the whole backward: every traced node gets the same tensor pre-hook
(a shared hook dict, so registering costs no Python call per node), and the hook asks the
engine which node is about to run (`_SharedPreHook`). An `Observer` turns those calls into
steps: before recording a node it settles the previous step, reading whether autograd
released that node's saved values (one raw slot read, nothing unpacked) and which watched
storages died since."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .errors import NotObservableError
from .keeper import gc_paused
from .model import Residual, Status, Step, Storage, Trace
from .saved import is_custom_function
from .storage import weak_expired


class Observer:
    """Turns 'this node is about to run' into the trace's steps, releases and frees."""

    def __init__(self, trace: Trace, keep: bool, on_step: Callable[[Step], None] | None = None) -> None:
        self.trace = trace
        self.keep = keep
        self.on_step = on_step
        self.steps: list[Step] = []
        self.index_of = {g: i for i, g in enumerate(trace._graph_nodes)}
        self.live: dict[int, list[Residual]] = {}  # node index -> residuals not yet released
        self.unreleased: dict[Storage, int] = {}  # storage -> its residuals autograd still holds
        self.pending: list[tuple[Storage, int]] = []  # let go of by the graph, not yet freed (with cdata)
        self.probes: dict[int, tuple[str, int | None]] = {}  # node index -> the raw slot that tells release
        self.last: int | None = None  # the node index of the step recorded last
        if not keep:  # with retain_graph nothing is released: nothing to watch
            graph_nodes = trace._graph_nodes
            for i, node in enumerate(trace.nodes):
                held = [r for r in node.residuals if r.status is not Status.RELEASED]
                if held:
                    self.live[i] = held
                    self.probes[i] = _probe(graph_nodes[i], held[0].slot)
                    for r in held:
                        if r.storage is not None:
                            self.unreleased[r.storage] = self.unreleased.get(r.storage, 0) + 1

    def before(self, gnode: Any) -> None:
        """The engine is about to run `gnode`'s rule: settle the previous step, record this one."""
        i = self.index_of.get(gnode)
        if i is None:  # a node outside this trace (cannot happen for the engine's own task)
            return
        if self.steps:
            self.settle()
        self.last = i
        node = self.trace.nodes[i]
        step = Step(len(self.steps), node)
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)

    def settle(self) -> None:
        """Record what the last step released and which watched storages died since."""
        step, i = self.steps[-1], self.last
        held = self.live.get(i) if i is not None else None
        if held is not None and _is_released(self.trace._graph_nodes[i], self.probes[i]):
            del self.live[i]
            step.released = held
            for r in held:
                r.status = Status.RELEASED
                r.released_at = step.index
                storage = r.storage
                if storage is None:
                    continue
                left = self.unreleased[storage] = self.unreleased[storage] - 1
                # watch a storage once the graph lets go of it entirely; parameters and the
                # outputs (which the trace itself holds) are settled once, in finish()
                if left == 0 and not (storage.is_parameter or storage.is_output) and storage.weak is not None:
                    self.pending.append((storage, storage.weak))
        if self.pending:
            expired = weak_expired
            still = []
            for storage, cdata in self.pending:
                if expired(cdata):
                    step.freed.append(storage)
                    for r in storage.residuals:
                        r.freed_at = step.index
                else:
                    still.append((storage, cdata))
            self.pending = still

    def finish(self) -> None:
        """After backward: settle the last step, then say who still holds what was not freed."""
        if self.steps:
            self.settle()
        for storage in self.trace.storages:
            if not storage.expired():
                for r in storage.residuals:
                    r.held_by = _held_by(storage, self.keep)
            elif storage.residuals[0].freed_at is None and self.steps:  # died after the last step watched
                for r in storage.residuals:
                    r.freed_at = self.steps[-1].index


class _SharedPreHook:
    """One tensor pre-hook on every node, through one shared hook dict (PyTorch's own
    mechanism: each node keeps a reference to the dict). `remove()` empties the dict, so a later
    backward of the same graph calls nothing of ours."""

    def __init__(self, graph_nodes: list[Any], before: Callable[[Any], None]) -> None:
        current_node = torch._C._current_autograd_node

        def hook(_grad: Any) -> None:
            before(current_node())

        self.hooks: dict[int, Callable[[Any], None]] = {0: hook}
        carrier = torch.empty(0)
        carrier._backward_hooks = self.hooks  # the dict every node's tensor pre-hook reads
        with gc_paused():
            for g in graph_nodes:
                g._register_hook_dict(carrier)

    def remove(self) -> None:
        """Detach: the nodes keep an empty hook dict."""
        self.hooks.clear()


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
    with gc_paused():
        observer = Observer(trace, keep, on_step)
    handle = _SharedPreHook(trace._graph_nodes, observer.before)
    trace.steps = observer.steps
    trace.retained = keep
    try:
        with gc_paused():
            torch.autograd.backward(trace._outputs, grad_tensors=gradient, retain_graph=keep,
                                    create_graph=create_graph)
    except Exception as err:
        trace.error = str(err)
        raise
    finally:
        handle.remove()
        observer.finish()


def _probe(gnode: Any, slot: str) -> tuple[str, int | None]:
    """The raw attribute (and list index) that tells whether a node's saved values are gone: one
    slot stands for all (a node releases every saved value at once, right after its rule ran)."""
    if is_custom_function(gnode):
        return ("_raw_saved_tensors", None)
    name, _, index = slot.partition("[")
    return ("_raw_saved_" + name, int(index.rstrip("]")) if index else None)


def _is_released(gnode: Any, probe: tuple[str, int | None]) -> bool:
    """Read the probe's raw slot without unpacking it: None data (or PyTorch refusing) means released."""
    attr, index = probe
    try:
        raw = getattr(gnode, attr)
        if attr == "_raw_saved_tensors":
            return False  # a custom Function's saved tensors raise once released
        if index is not None:
            raw = raw[index]
        return raw is not None and raw.data is None
    except (RuntimeError, IndexError):  # "saved tensors ... have already been freed"
        return True


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
