"""Recording one training step: the phases (backward calls, each reverse rule, zero_grad, the
optimizer step) marked in the allocation stream, and at each mark who holds each storage
(`_StepRecorder`); on the meta device, where there is no allocator, the stream itself (`_MetaStream`)."""

from __future__ import annotations

import contextlib
import inspect
import operator
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from itertools import compress
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import keeper
from ..frames import forget_snapshot
from ..internals import StorageRef, TorchDispatchMode, sequence_nr
from ..live import is_leaf_node, walk
from ..memory import AllocationStream, Measurement
from ..rows import Status
from ..saved import released, saved_slots
from ..storage import allocated_bytes, weak_expired
from .holders import Holders, SavedValue, storage_key
from .inputs import _tensors_in
from .ledger import Observations

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

_TRACEKIT_DIR = os.path.dirname(os.path.dirname(__file__))  # tracekit's own files are library frames
_LIBRARY_DIRS = tuple(
    os.path.normpath(d) + os.sep
    for d in (os.path.dirname(torch.__file__), _TRACEKIT_DIR, sysconfig.get_paths()["stdlib"])
)


META_SOURCE = ("predicted on the meta device, nothing run on data: each storage an op makes counts as "
               "allocated until the first op or mark that finds it gone; scratch memory inside kernels is not seen")


class _MetaStream(TorchDispatchMode):
    """On the meta device there is no allocator: every storage an op makes is an allocation, and
    a storage found gone (polled before each op and at each mark) is a free."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, int]] = []
        self.marks: list[tuple[str, int]] = []
        # the storages live now, in the order they were made: key, weak reference (and its bare
        # reference, checked in one pass of C calls per op), bytes
        self.keys: list[int] = []
        self.refs: list[StorageRef] = []
        self.bare: list[int] = []
        self.sizes: list[int] = []
        self.live: set[int] = set()
        self.result: Measurement | None = None

    def poll(self) -> None:
        gone = list(map(weak_expired, self.bare))
        if not any(gone):
            return
        for key, nbytes in compress(zip(self.keys, self.sizes), gone):
            self.live.discard(key)
            self.events.append((key, -nbytes))
        kept = list(map(operator.not_, gone))
        self.keys, self.refs, self.bare, self.sizes = (list(compress(column, kept)) for column in
                                                       (self.keys, self.refs, self.bare, self.sizes))

    def _add(self, key: int, weak: StorageRef, nbytes: int) -> None:
        self.live.add(key)
        self.keys.append(key)
        self.refs.append(weak)
        self.bare.append(weak.cdata)
        self.sizes.append(nbytes)

    def watch(self, storages: dict[int, StorageRef], sizes: dict[int, tuple[str, int]]) -> None:
        """Also report the end of storages made before the measurement (seen at its start)."""
        for key, weak in storages.items():
            if key not in self.live:
                self._add(key, weak, sizes[key][1])

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.poll()
        out = func(*args, **(kwargs or {}))
        for t in _tensors_in(out):
            if t.device.type == "meta" and t.layout == torch.strided:
                storage = t.untyped_storage()
                key = storage_key(storage)
                if key not in self.live and storage.nbytes():
                    self._add(key, StorageRef(storage), storage.nbytes())
                    self.events.append((key, storage.nbytes()))
        return out

    def mark(self, label: str) -> None:
        self.poll()
        if not self.marks:
            self.events.clear()  # the region starts at the first mark
        self.marks.append((label, len(self.events)))

    def stream(self) -> AllocationStream:
        return AllocationStream("meta", list(self.events), list(self.marks))


def _forget_containers(frame: Any, scope: dict[str, Any], names: list[str]) -> None:
    """Python < 3.13 keeps the f_locals snapshot of a running frame: drop the entries that hold
    tensors (in containers too), so that reading the caller's variables never extends a lifetime."""
    if sys.version_info >= (3, 13) or not frame.f_code.co_flags & inspect.CO_OPTIMIZED or scope is frame.f_globals:
        return
    for name in names:
        scope.pop(name, None)


def _library_frame(frame: Any) -> bool:
    return os.path.normpath(frame.f_code.co_filename).startswith(_LIBRARY_DIRS)


class _StepRecorder(TorchFunctionMode):
    """Marks the step's phases (backward calls, graph nodes, optimizer and zero_grad) and, at each
    mark, which storage each holder (parameters, gradients, ...) holds."""

    _BACKWARDS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
                 held: Any, step: Callable[[], Any], probe: Any) -> None:
        super().__init__()
        self.probe = probe  # the allocation stream (measure's probe, or _MetaStream): marks go into it
        self.device = device
        self.optimizer = optimizer
        tensors = list(model.parameters()) + [p for g in optimizer.param_groups for p in g["params"]]
        self.params = list({id(p): p for p in tensors}.values())
        self.buffers = list(model.buffers())
        self.names = {storage_key(p.untyped_storage()): n for n, p in model.named_parameters()}
        self.held = held
        self.step = step
        self.labels: list[tuple[str, int]] = []  # (label, backward pass or 0)
        self.observations = Observations()  # per mark: storage key -> (category, bytes), as changes
        self.holders = Holders(device)
        # what the running backward's graph saved and still holds (by id), each rule's values, the values
        # of the rules that ran whose release is still to be seen, whether the backward keeps its graph
        self.saved: dict[int, SavedValue] = {}
        self.saved_by_node: dict[Any, list[SavedValue]] = {}
        self.ran: list[SavedValue] = []
        self.retain = False
        self.retained: dict[int, tuple[StorageRef, int]] = {}  # saved storages of graphs kept by retain_graph
        self.passes = 0
        self.rules = 0
        self.runner: Any = None  # the frame that called the step
        self.frame_held: list[torch.Tensor] | None = None  # while backward runs: what the caller's frames hold
        self.optimizer_steps = 0
        self.gone: list[list[int]] = []  # per mark: storages seen at the start that are gone by now

    # -- marks
    def mark(self, label: str, backward_pass: int = 0, rule: Any = None) -> None:
        """A mark in the allocation stream, and who holds each storage then: all read again, or (`rule`:
        the node about to run, inside backward) what the rules that ran since changed."""
        self.probe.mark(f"{len(self.labels)}")
        self.labels.append((label, backward_pass))
        if rule is not None:
            ran = [v for v in self.ran if id(v) in self.saved]  # (a phase mark since may have seen them go)
            application = _tensors_in([self.held, self._static_refs(), self.frame_held])
            changes, self.ran = self.holders.after_rule(self.params, application, ran, self.retain, self.retained,
                                                        self.saved)
            self.gone.append(self.holders.gone(changes))
            self.observations.change(changes)
            self.ran += self.saved_by_node.get(rule, [])
            return
        self.gone.append(self.holders.gone())
        self.observations.add(self._observe())

    def _observe(self) -> dict[int, tuple[str, int]]:
        refs = self.frame_held if self.frame_held is not None else self._frame_tensors()
        application = _tensors_in([self.held, self._static_refs(), refs])
        del refs
        self.saved = {i: v for i, v in self.saved.items() if not released(v.node, [v.slot])}
        for ptr, (weak, _) in list(self.retained.items()):
            if weak.expired():
                del self.retained[ptr]
        return self.holders.read_all(self.params, self.buffers, _tensors_in(list(self.optimizer.state.values())),
                                     application, list(self.saved.values()), self.retained, not self.observations)

    def _static_refs(self) -> list[Any]:
        """What the step function holds: its closure cells and the globals it names, and the same
        for every Python function among those (`step=lambda: step(False)` reaches step's batch)."""
        found: list[Any] = []
        todo, seen = [self.step], set()
        while todo:
            fn = todo.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            held: list[Any] = []
            for cell in getattr(fn, "__closure__", None) or ():
                with contextlib.suppress(ValueError):
                    held.append(cell.cell_contents)
            code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
            if code is not None:
                held.extend(scope[n] for n in code.co_names if n in scope)
            found.extend(held)
            todo.extend(v for v in held if isinstance(v, types.FunctionType))
        return [v for v in found if not isinstance(v, (torch.nn.Module, torch.optim.Optimizer, types.FunctionType))]

    def _frame_tensors(self) -> list[torch.Tensor]:
        """Tensors in the local variables of the caller's frames now running (the step and user code)."""
        frame = sys._getframe(1)
        chain = []
        while frame is not None and frame is not self.runner:
            chain.append(frame)
            frame = frame.f_back
        if frame is None or not chain:
            return []  # not inside the step (or on another thread)
        found: list[torch.Tensor] = []
        for f in chain:
            if f is chain[-1] or not _library_frame(f):
                scope = f.f_locals
                holding = []
                for name, value in scope.items():
                    if not isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
                        tensors = list(_tensors_in(value))
                        if tensors:
                            found.extend(tensors)
                            holding.append(name)
                forget_snapshot(f, scope)
                _forget_containers(f, scope, holding)
                del scope
        return found

    # -- running the step
    def run(self) -> None:
        self.runner = sys._getframe()
        self.step()  # the return value is dropped at once

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self._BACKWARDS:
            return self._backward(func, args, kwargs)
        return func(*args, **kwargs)

    def _backward(self, func: Any, args: Any, kwargs: Any) -> Any:
        bound = inspect.signature(func).bind(*args, **kwargs).arguments
        roots = bound.get("self", bound.get("tensors", bound.get("outputs")))
        roots = [roots] if isinstance(roots, torch.Tensor) else list(roots)
        create = bool(bound.get("create_graph", False))
        retain = bound.get("retain_graph")
        retain = create if retain is None else bool(retain)
        self.passes += 1
        n = self.passes
        self.frame_held = self._frame_tensors()  # the caller's frames wait, unchanged, while backward runs
        self.retain, self.ran = retain, []
        nodes = walk([r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None])
        keeper.keep(sorted((g for g in nodes if not is_leaf_node(g)), key=sequence_nr))
        self._collect_saved(nodes)  # in its own frame: no saved value outlives the call
        self.mark("after forward", n)
        handles = [node.register_prehook(self._rule_hook(node, n)) for node in nodes]
        try:
            return func(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
            del handles
            if retain:
                for v in self.saved.values():
                    if not released(v.node, [v.slot]):
                        self.retained[v.key] = (v.storage, v.nbytes)
            self.saved, self.saved_by_node, self.ran = {}, {}, []
            del nodes, roots, bound
            self.mark("after backward", n)
            self.frame_held = None

    def _collect_saved(self, nodes: list[Any]) -> None:
        """Remember every tensor the graph saved on the device (node, slot, storage, bytes)."""
        for node in nodes:
            if is_leaf_node(node):
                continue
            for s in saved_slots(node):
                t = s.tensor
                if s.status is Status.LIVE and t is not None and t.layout == torch.strided and t.device == self.device:
                    storage = t.untyped_storage()
                    if storage.nbytes():
                        nbytes = allocated_bytes(storage.nbytes(), str(self.device))
                        v = SavedValue(node, s.slot, storage_key(storage), nbytes, StorageRef(storage))
                        self.saved[id(v)] = v
                        self.saved_by_node.setdefault(node, []).append(v)

    def _rule_hook(self, node: Any, backward_pass: int) -> Callable[[Any], None]:
        name = node.name()
        if is_leaf_node(node):
            var = node.variable
            name += f" ({self.names.get(storage_key(var.untyped_storage()), 'leaf')})"

        def hook(grad_outputs: Any) -> None:
            self.rules += 1
            self.mark(f"backward {self.rules}: {name}", backward_pass, node)

        return hook

    @contextlib.contextmanager
    def watching(self, model: torch.nn.Module) -> Iterator[None]:
        """Marks around zero_grad and the optimizer step while the step runs (all undone after)."""
        def wrap(owner: Any) -> tuple[Any, bool]:
            had = "zero_grad" in vars(owner)
            original = owner.zero_grad

            def zero_grad(*a: Any, **k: Any) -> Any:
                result = original(*a, **k)
                self.mark("after zero_grad")
                return result

            owner.zero_grad = zero_grad
            return original, had

        def begin(*_: Any) -> None:
            self.mark("optimizer step begins")

        def done(*_: Any) -> None:
            self.optimizer_steps += 1
            self.mark("after optimizer step")

        wrapped = [(owner, *wrap(owner)) for owner in (self.optimizer, model)]
        hooks = [self.optimizer.register_step_pre_hook(begin), self.optimizer.register_step_post_hook(done)]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()
            for owner, original, had in wrapped:
                if had:
                    owner.zero_grad = original
                else:
                    del owner.zero_grad
