"""A memory budget for one training step, measured allocation by allocation.

`budget()` runs one steady-state training step (after a warm-up step) under the allocator's
own event stream (every allocation and free, in order) and names every live byte at every
moment. The categories (each byte is in exactly one; they add up to the measured bytes at
every point of the step):

- **parameters**: the model's parameters and buffers (BatchNorm's running statistics
  included) and any other tensor the optimizer updates.
- **gradients**: the `.grad` of those parameters. `zero_grad(set_to_none=True)` frees them
  at the start of a step; `set_to_none=False` keeps them (as zeros) for the whole step.
- **optimizer state**: `optimizer.state` (Adam: `exp_avg`, `exp_avg_sq`, `step` per
  parameter; SGD without momentum: nothing).
- **saved activations**: tensors the autograd graph saved for backward that only the graph
  holds (forward outputs the reverse rules read; under autocast also the low-precision
  copies of the weights); released rule by rule during backward.
- **application references**: what the caller's code holds: the batch, and the variables
  of the step's own frames (the loss, an output kept in a variable, a list of losses). A
  saved tensor the caller also holds counts here: freeing the graph would not free it.
- **temporary workspaces**: memory allocated during the step and freed before it ends that
  none of the above holds: gradients flowing between reverse rules, an op's scratch
  buffers, the optimizer's intermediate results.
- **unattributed**: measured bytes no category explains (an allocation that outlives the
  step with no known holder; on CUDA, memory allocated before the step that tracekit cannot
  identify). Shown, never folded into another category.
- **allocator reserve**: CUDA only, reserved − allocated (cached by the allocator, not
  handed out); on CPU 0. Not part of the allocated total.

How a live allocation gets its category: at every mark (the start, after zero_grad, after
forward, before each reverse rule, around the optimizer step, the end) tracekit looks at
who holds each storage (in the order above, first match wins). Between two marks an
allocation keeps the category of the first mark at or after which it is seen held (what it
is or is becoming); one not seen held from then on is a temporary workspace if the step both
allocated and freed it, unattributed otherwise. The peak is the highest point of the
measured stream itself, so its breakdown is that moment's.

What is fed to the model (`batch`):

- a tensor: `output = model(batch)`; `loss = loss_fn(output)`;
- a tuple or list `(inputs, targets)`: `output = model(inputs)` (`model(*inputs)` when
  inputs is itself a tuple or list, `model(**inputs)` when it is a dict);
  `loss = loss_fn(output, targets)`; a 1-tuple `(inputs,)` has no targets;
- a dict (as a DataLoader of dicts yields): with `loss_fn`, the first of the keys
  `target`, `targets`, `label`, `labels`, `y` is the target and every other entry is a
  keyword argument, `loss = loss_fn(model(**rest), target)` (`loss_fn(model(**batch))` if
  there is no target key); without `loss_fn`, `model(**batch)` computes its own loss (the
  output is the loss, or has a `loss` entry or attribute, as Hugging Face models do);
- anything else: pass `step=`, a callable that does forward, loss, backward and
  `optimizer.step()` itself; tracekit finds the phases from the backward calls, the
  autograd graph's node hooks and the optimizer's step hooks.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import keeper
from .build import is_leaf_node, walk
from .errors import BudgetInputError
from .frames import forget_snapshot
from .keeper import gc_paused
from .memory import AllocationStream, Measurement, _quiet_stderr, check_device, measure
from .model import Status
from .models import seeded_mlp
from .render.table import aligned, html_table
from .saved import released, saved_slots
from .storage import allocated_bytes, format_bytes

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

CATEGORIES = (
    "parameters", "gradients", "optimizer state", "saved activations",
    "application references", "temporary workspaces", "unattributed", "allocator reserve",
)
ALLOCATED = CATEGORIES[:-1]  # the categories that add up to the allocated bytes
DEFINITIONS = {
    "parameters": "model parameters and buffers (BatchNorm running statistics included), and anything "
                  "else the optimizer updates",
    "gradients": "the parameters' .grad (zero_grad(set_to_none=True) frees them; set_to_none=False keeps "
                 "zeros)",
    "optimizer state": "optimizer.state (Adam: exp_avg, exp_avg_sq, step per parameter; plain SGD: none)",
    "saved activations": "tensors the autograd graph saved for backward and only the graph holds; "
                         "released rule by rule during backward",
    "application references": "what the caller's code holds: the batch and the step's variables (the loss, "
                              "a kept output); a saved tensor the caller also holds counts here",
    "temporary workspaces": "allocated and freed within the step, held by none of the above: gradients "
                            "flowing between reverse rules, scratch buffers, optimizer intermediates",
    "unattributed": "measured bytes no category explains (no known holder; on CUDA, memory from before "
                    "the step tracekit cannot identify)",
    "allocator reserve": "CUDA: reserved − allocated, cached by the allocator (0 on CPU); not in the "
                         "allocated total",
}
TARGET_KEYS = ("target", "targets", "label", "labels", "y")
FORMS = (
    "tk.budget accepts: batch=tensor (model(batch), loss_fn(output)); batch=(inputs, targets) "
    "(model(inputs), loss_fn(output, targets)); batch=dict (target under one of "
    f"{', '.join(TARGET_KEYS)}, the rest as model(**kwargs); without loss_fn the model returns its "
    "own loss); or step=callable doing forward, loss, backward and optimizer.step() itself."
)
_HOLDERS = ALLOCATED[:5]  # who can hold a storage at a mark, first match wins
_LIBRARY_DIRS = tuple(
    os.path.normpath(d) + os.sep
    for d in (os.path.dirname(torch.__file__), os.path.dirname(__file__), sysconfig.get_paths()["stdlib"])
)


META_SOURCE = ("predicted on the meta device, nothing run on data: each storage an op makes counts as "
               "allocated until the first op or mark that finds it gone; scratch memory inside kernels is not seen")


def _device(name: str) -> torch.device:
    """The device to budget on: cpu or cuda (measured), or meta (predicted without data)."""
    return torch.device("meta") if torch.device(name).type == "meta" else check_device(name)


@dataclass
class Moment:
    """The bytes of each category at one point of the step (the categories add up to `live`)."""

    label: str
    bytes: dict[str, int]
    live: int  # measured bytes allocated at this point
    position: int = 0  # allocator events since the start of the step
    peak: bool = False  # the highest point of the measured stream


@dataclass
class Budget:
    """One training step's memory: the measured stream, its moments, the peak and its breakdown."""

    device: str
    timeline: list[Moment]  # every mark of the step, and the peak where it happened
    peak: int  # measured peak of allocated bytes during the step
    peak_moment: str  # the label of the peak moment in the timeline
    at_peak: dict[str, int]  # the breakdown of that moment
    own_peaks: dict[str, int]  # each category's own highest value, whenever it happened
    source: str
    measurement: Measurement | None = field(default=None, repr=False)
    live: list[int] = field(default_factory=list, repr=False)  # measured bytes after each allocator event
    series: dict[str, list[int]] = field(default_factory=dict, repr=False)  # each category, same positions
    notes: dict[str, str] = field(default_factory=dict, repr=False)  # what each category holds here

    @property
    def _how(self) -> str:
        return "predicted" if self.device == "meta" else "measured"

    @property
    def naive_sum(self) -> int:
        """Sum of each category's own peak: what adding up separate measurements would claim."""
        return sum(self.own_peaks.get(c, 0) for c in ALLOCATED)

    def moment(self, label: str) -> Moment:
        """The moment with this label (`KeyError` naming the labels if there is none)."""
        for m in self.timeline:
            if m.label == label:
                return m
        raise KeyError(f"no moment {label!r}; the moments are: {[m.label for m in self.timeline]}")

    def table_rows(self) -> list[tuple[str, ...]]:
        """(category, start, at the peak, end, the category's own peak) in short bytes."""
        start, end = self.timeline[0].bytes, self.timeline[-1].bytes
        rows = [(c, format_bytes(start.get(c, 0)), format_bytes(self.at_peak.get(c, 0)), format_bytes(end.get(c, 0)),
                 format_bytes(self.own_peaks.get(c, 0))) for c in ALLOCATED]
        rows.append((f"total allocated ({self._how})", format_bytes(self.timeline[0].live), format_bytes(self.peak),
                     format_bytes(self.timeline[-1].live), format_bytes(self.naive_sum)))
        reserve = "allocator reserve"
        rows.append((reserve, format_bytes(start.get(reserve, 0)), format_bytes(self.at_peak.get(reserve, 0)),
                     format_bytes(end.get(reserve, 0)), format_bytes(self.own_peaks.get(reserve, 0))))
        return rows

    _HEADER = ("category", "start", "at the peak", "end", "own peak")

    def _head(self) -> list[str]:
        where = self.peak_moment[len("peak, "):] if self.peak_moment.startswith("peak, ") else \
            f"at '{self.peak_moment}'"
        return [
            f"training-step budget on {self.device}: peak {format_bytes(self.peak)}, {where} "
            f"({self._how}; {self.source})",
            f"naive sum of each category's own peak: {format_bytes(self.naive_sum)} "
            f"({self.naive_sum / max(self.peak, 1):.2f}× the real peak)",
        ]

    def text(self) -> str:
        """The head lines, each category's definition, and the table (start, peak, end, own peak)."""
        notes = [f"  {c}: {self.notes.get(c, DEFINITIONS[c])}" for c in CATEGORIES]
        table = aligned(self._HEADER, self.table_rows(), "  ")
        return "\n".join(self._head() + ["categories (each byte counted once):"] + notes) + "\n" + table

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        definitions = [(c, self.notes.get(c, DEFINITIONS[c])) for c in CATEGORIES]
        return html_table(self._HEADER, self.table_rows(), "\n".join(self._head()), definitions=definitions)

    def figure(self) -> Any:
        """The measured stream as stacked categories, the phases, and the peak where it happened."""
        from .render.figures import budget_figure

        return budget_figure(self, ALLOCATED, _RULE)


# ---------------------------------------------------------------- what the batch means


def _tensors_in(value: Any, depth: int = 4) -> Iterator[torch.Tensor]:
    """Tensors in a value and its containers (tuples, lists, sets, dicts), a few levels deep."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth and isinstance(value, (tuple, list, set, frozenset)):
        for v in value:
            yield from _tensors_in(v, depth - 1)
    elif depth and isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v, depth - 1)


def _positional(fn: Callable[..., Any]) -> tuple[int, int] | None:
    """(required, accepted) positional arguments of fn; None when Python cannot say."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    many = any(p.kind == p.VAR_POSITIONAL for p in params)
    return sum(p.default is p.empty for p in pos), (10**6 if many else len(pos))


def _split_batch(batch: Any) -> tuple[Any, Any, bool]:
    """(inputs, target, has_target) for the accepted batch forms, or BudgetInputError."""
    if isinstance(batch, torch.Tensor):
        return batch, None, False
    if isinstance(batch, (tuple, list)):
        if len(batch) == 1:
            return batch[0], None, False
        if len(batch) == 2:
            return batch[0], batch[1], True
        raise BudgetInputError(f"batch is a {type(batch).__name__} of {len(batch)} items; expected (inputs, targets) "
                               f"or (inputs,). {FORMS}")
    if isinstance(batch, dict):
        if not all(isinstance(k, str) for k in batch):
            raise BudgetInputError(f"batch is a dict with non-string keys; its entries are passed as keyword "
                                   f"arguments. {FORMS}")
        return batch, None, False
    raise BudgetInputError(f"batch is a {type(batch).__name__}. {FORMS}")


def _call_model(model: Callable[..., Any], inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _own_loss(output: Any) -> torch.Tensor | None:
    """The loss a model computed itself: a scalar output, or a `loss` entry or attribute."""
    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else None
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def _check_loss_fn(loss_fn: Callable[..., Any] | None, batch: Any) -> None:
    """Raise BudgetInputError if loss_fn cannot take what the batch form gives it."""
    inputs, target, has_target = _split_batch(batch)
    if isinstance(batch, dict) and loss_fn is not None:
        has_target = any(k in batch for k in TARGET_KEYS)
    if loss_fn is None:
        if has_target:
            raise BudgetInputError("batch has targets but no loss_fn was given: pass loss_fn(output, target), "
                                   f"e.g. torch.nn.functional.mse_loss. {FORMS}")
        return
    if not callable(loss_fn):
        raise BudgetInputError(f"loss_fn is a {type(loss_fn).__name__}, not a callable. {FORMS}")
    arity = _positional(loss_fn)
    if arity is None:
        return
    required, accepted = arity
    if has_target and accepted < 2:
        raise BudgetInputError("loss_fn takes one argument (output) but the batch has targets: pass "
                               f"loss_fn(output, target), or a batch without targets. {FORMS}")
    if not has_target and required > 1:
        raise BudgetInputError(f"loss_fn needs {required} arguments but the batch has no targets: pass "
                               f"batch=(inputs, targets) (or a dict with a target key). {FORMS}")


def _loss(model: Callable[..., Any], batch: Any, loss_fn: Callable[..., Any] | None) -> torch.Tensor:
    """Run the model on one batch (in the documented form) and return the scalar loss."""
    inputs, target, has_target = _split_batch(batch)
    if isinstance(batch, dict) and loss_fn is not None:
        key = next((k for k in TARGET_KEYS if k in batch), None)
        inputs = {k: v for k, v in batch.items() if k != key}
        target, has_target = (batch[key], True) if key is not None else (None, False)
    if loss_fn is not None:
        loss = loss_fn(_call_model(model, inputs), target) if has_target else loss_fn(_call_model(model, inputs))
    else:
        output = _call_model(model, inputs)
        loss = _own_loss(output)
        if loss is None:
            if isinstance(batch, dict) or not isinstance(output, torch.Tensor):
                raise BudgetInputError(f"without loss_fn the model must return its loss (a scalar tensor, or one "
                                       f"under 'loss'); it returned a {type(output).__name__}. {FORMS}")
            loss = output.float().pow(2).mean()  # a stand-in loss when the batch has no targets
        del output
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = type(loss).__name__ if not isinstance(loss, torch.Tensor) else f"a tensor of shape {tuple(loss.shape)}"
        raise BudgetInputError(f"the loss must be a scalar tensor; loss_fn returned {what}. {FORMS}")
    if loss.grad_fn is None:
        raise BudgetInputError("the loss has no autograd history: the model's parameters must require grad "
                               "and the step must not run under torch.no_grad().")
    return loss


def _micro_batches(batch: Any, k: int) -> list[Any]:
    """The batch cut into k micro-batches along dim 0 (views: no new memory)."""
    def cut(value: Any) -> list[Any]:
        if isinstance(value, torch.Tensor):
            if value.dim() == 0:
                return [value] * k
            if value.shape[0] < k:
                raise BudgetInputError(f"accumulate={k} needs at least {k} samples along dim 0; a batch tensor "
                                       f"has shape {tuple(value.shape)}.")
            return list(torch.tensor_split(value, k, dim=0))
        if isinstance(value, (tuple, list)):
            parts = [cut(v) for v in value]
            return [type(value)(p[i] for p in parts) for i in range(k)]
        if isinstance(value, dict):
            parts = {key: cut(v) for key, v in value.items()}
            return [{key: p[i] for key, p in parts.items()} for i in range(k)]
        return [value] * k

    return cut(batch)


def _builtin_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any, loss_fn: Callable[..., Any] | None,
    accumulate: int, autocast: torch.dtype | None, set_to_none: bool, device: torch.device,
) -> Callable[[], None]:
    """zero_grad; for each micro-batch forward, loss (÷ k), backward; optimizer.step()."""
    micro = _micro_batches(batch, accumulate) if accumulate > 1 else [batch]

    def step() -> None:
        optimizer.zero_grad(set_to_none=set_to_none)
        for part in micro:
            with torch.autocast(device.type, dtype=autocast) if autocast else contextlib.nullcontext():
                loss = _loss(model, part, loss_fn)
            if accumulate > 1:
                loss = loss / accumulate
            loss.backward()
        optimizer.step()

    return step


# ---------------------------------------------------------------- recording the step


def _key(storage: Any) -> int:
    """An allocation's identity: its address, or on the meta device (every address 0) its StorageImpl."""
    return storage._cdata if storage.device.type == "meta" else storage.data_ptr()


class _MetaStream(TorchDispatchMode):
    """On the meta device there is no allocator: every storage an op makes is an allocation, and
    a storage found gone (polled before each op and at each mark) is a free."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, int]] = []
        self.marks: list[tuple[str, int]] = []
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.result: Measurement | None = None

    def poll(self) -> None:
        for key, (weak, nbytes) in list(self.live.items()):
            if weak.expired():
                del self.live[key]
                self.events.append((key, -nbytes))

    def watch(self, storages: dict[int, StorageWeakRef], sizes: dict[int, tuple[str, int]]) -> None:
        """Also report the end of storages made before the measurement (seen at its start)."""
        for key, weak in storages.items():
            self.live.setdefault(key, (weak, sizes[key][1]))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.poll()
        out = func(*args, **(kwargs or {}))
        for t in _tensors_in(out):
            if t.device.type == "meta" and t.layout == torch.strided:
                storage = t.untyped_storage()
                key = _key(storage)
                if key not in self.live and storage.nbytes():
                    self.live[key] = (StorageWeakRef(storage), storage.nbytes())
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


@dataclass(eq=False)
class _SavedValue:
    """A tensor the running backward's graph saved on the device: where, which storage, its bytes."""

    node: Any
    slot: str
    key: int  # the storage's identity (see _key)
    nbytes: int
    storage: StorageWeakRef  # to notice when a graph kept by retain_graph lets it go


class _Recorder(TorchFunctionMode):
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
        self.names = {_key(p.untyped_storage()): n for n, p in model.named_parameters()}
        self.held = held
        self.step = step
        self.labels: list[tuple[str, int]] = []  # (label, backward pass or 0)
        self.observations: list[dict[int, tuple[str, int]]] = []  # per mark: pointer -> (category, bytes)
        self.saved: list[_SavedValue] = []  # what the running backward's graph saved and still holds
        self.retained: dict[int, tuple[StorageWeakRef, int]] = {}  # saved storages of graphs kept by retain_graph
        self.passes = 0
        self.rules = 0
        self.runner: Any = None  # the frame that called the step
        self.frame_held: list[torch.Tensor] | None = None  # while backward runs: what the caller's frames hold
        self.optimizer_steps = 0
        self.start_weak: dict[int, StorageWeakRef] = {}  # storages seen at the start, to notice their end
        self.gone: list[list[int]] = []  # per mark: storages seen at the start that are gone by now

    # -- marks
    def mark(self, label: str, backward_pass: int = 0) -> None:
        self.probe.mark(f"{len(self.labels)}")
        self.labels.append((label, backward_pass))
        gone = [ptr for ptr, weak in self.start_weak.items() if weak.expired()]
        for ptr in gone:
            del self.start_weak[ptr]
        self.gone.append(gone)
        self.observations.append(self._observe())

    def _observe(self) -> dict[int, tuple[str, int]]:
        out: dict[int, tuple[str, int]] = {}
        dev = str(self.device)
        first = not self.observations

        def put(tensors: Any, category: str) -> None:
            for t in tensors:
                if t is None or t.layout != torch.strided or t.device != self.device:
                    continue
                storage = t.untyped_storage()
                nbytes = storage.nbytes()
                if nbytes:
                    ptr = _key(storage)
                    out.setdefault(ptr, (category, allocated_bytes(nbytes, dev)))
                    if first and ptr not in self.start_weak:
                        self.start_weak[ptr] = StorageWeakRef(storage)

        put(self.params + self.buffers, "parameters")
        put((p.grad for p in self.params), "gradients")
        put(_tensors_in(list(self.optimizer.state.values())), "optimizer state")
        refs = self.frame_held if self.frame_held is not None else self._frame_tensors()
        put(_tensors_in([self.held, self._static_refs(), refs]), "application references")
        del refs
        self.saved = [v for v in self.saved if not released(v.node, [v.slot])]
        for v in self.saved:
            out.setdefault(v.key, ("saved activations", v.nbytes))
        for ptr, (weak, nbytes) in list(self.retained.items()):
            if weak.expired():
                del self.retained[ptr]
            else:
                out.setdefault(ptr, ("saved activations", nbytes))
        return out

    def _static_refs(self) -> list[Any]:
        """What the step function itself holds: its closure cells and the globals it names."""
        fn = self.step
        code = getattr(fn, "__code__", None)
        found: list[Any] = []
        for cell in getattr(fn, "__closure__", None) or ():
            with contextlib.suppress(ValueError):
                found.append(cell.cell_contents)
        scope = getattr(fn, "__globals__", {})
        if code is not None:
            found.extend(scope[n] for n in code.co_names if n in scope)
        return [v for v in found if not isinstance(v, (torch.nn.Module, torch.optim.Optimizer))]

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
        nodes = walk([r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None])
        keeper.keep(sorted((g for g in nodes if not is_leaf_node(g)), key=lambda g: g._sequence_nr()))
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
                for v in self.saved:
                    if not released(v.node, [v.slot]):
                        self.retained[v.key] = (v.storage, v.nbytes)
            self.saved = []
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
                        self.saved.append(_SavedValue(node, s.slot, _key(storage), nbytes, StorageWeakRef(storage)))

    def _rule_hook(self, node: Any, backward_pass: int) -> Callable[[Any], None]:
        name = node.name()
        if is_leaf_node(node):
            var = node.variable
            name += f" ({self.names.get(_key(var.untyped_storage()), 'leaf')})"

        def hook(grad_outputs: Any) -> None:
            self.rules += 1
            self.mark(f"backward {self.rules}: {name}", backward_pass)

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


# ---------------------------------------------------------------- naming every live byte


def _resolve(seen: dict[int, str | None], fallback: str) -> tuple[dict[int, str], str]:
    """Per mark where an allocation was live: the holder seen then, else the next one seen (what it
    is becoming: a gradient before AccumulateGrad takes it), else `fallback`; and the category
    before its first mark."""
    resolved: dict[int, str] = {}
    ahead: str | None = None
    for k in reversed(list(seen)):
        ahead = seen[k] or ahead
        resolved[k] = ahead or fallback
    first = min(seen) if seen else None
    return resolved, resolved[first] if first is not None else fallback


def _fill_unreported(stream: AllocationStream, observations: list[dict[int, tuple[str, int]]],
                     gone: list[list[int]]) -> tuple[AllocationStream, int]:
    """The stream with the frees the CPU profiler does not report (of memory allocated before it
    started) put back: at the first mark that finds the storage gone, or just before its address
    is handed out again. Returns the stream and how many frees were put back."""
    before = {ptr: nbytes for ptr, (_, nbytes) in observations[0].items()}
    mark_at = [p for _, p in stream.marks]
    events: list[tuple[int, int]] = []
    marks: list[tuple[str, int]] = []
    added = 0
    k = 0
    for i in range(len(stream.events) + 1):
        while k < len(mark_at) and mark_at[k] == i:
            for ptr in gone[k]:
                if ptr in before:
                    events.append((ptr, -before.pop(ptr)))
                    added += 1
            marks.append((stream.marks[k][0], len(events)))
            k += 1
        if i == len(stream.events):
            break
        ptr, d = stream.events[i]
        if ptr in before:
            if d > 0:  # the address is reused: the old allocation was freed unreported
                events.append((ptr, -before[ptr]))
                added += 1
            del before[ptr]
        events.append((ptr, d))
    return AllocationStream(stream.device, events, marks, stream.reserved, stream.allocated_at_start,
                            stream.reserved_at_start), added


@dataclass(eq=False)
class _Allocation:
    """One allocation live during the step: its bytes, the events that made and freed it, who
    held it at each mark where it was live, and from that its category at each mark."""

    size: int
    made: int  # allocator event index; -1 for an allocation older than the step
    freed: int | None = None
    holders: dict[int, str | None] = field(default_factory=dict)  # mark -> the holder seen then (None: none)
    categories: dict[int, str] = field(default_factory=dict)  # mark -> its category from that mark on
    first_category: str = "unattributed"  # its category before its first mark

    def resolve(self) -> None:
        """Settle the categories from the holders (see _resolve)."""
        fallback = "temporary workspaces" if self.made >= 0 and self.freed is not None else "unattributed"
        self.categories, self.first_category = _resolve(self.holders, fallback)

    def category(self, mark: int) -> str:
        """Its category between this mark and the next."""
        return self.categories.get(mark, self.first_category)


@dataclass
class _Ledger:
    """The step's allocations in stream order: which one each event makes or frees, which are live
    at each mark, and the measured bytes at the start."""

    by_event: list[_Allocation]
    live_at_mark: list[list[_Allocation]]
    start: int


def _ledger(stream: AllocationStream, observations: list[dict[int, tuple[str, int]]]) -> _Ledger:
    """Follow the allocation stream up to the last mark, noting at each mark who holds each live allocation."""
    mark_at = [p for _, p in stream.marks]
    events = stream.events[:mark_at[-1]]  # events after the last mark are not part of the step
    older: list[_Allocation] = []  # allocations made before the step
    live: dict[int, _Allocation] = {}  # pointer -> the allocation there now
    for ptr, (_, nbytes) in observations[0].items():
        live[ptr] = _Allocation(nbytes, -1)
        older.append(live[ptr])
    alive = set(live)
    for ptr, d in events:  # frees of allocations made before the step that nothing identified
        if d > 0:
            alive.add(ptr)
        elif ptr in alive:
            alive.discard(ptr)
        else:
            live[ptr] = _Allocation(-d, -1)
            older.append(live[ptr])
    unidentified = None  # CUDA knows the absolute count: what no storage explains is one allocation
    if stream.allocated_at_start is not None:
        unidentified = _Allocation(0, -1)
    by_event: list[_Allocation] = []
    live_at_mark: list[list[_Allocation]] = []
    k = 0
    for i in range(len(events) + 1):
        while k < len(mark_at) and mark_at[k] == i:
            held = observations[k]
            for ptr, allocation in live.items():
                holder = held.get(ptr)
                allocation.holders[k] = holder[0] if holder else None
            live_at_mark.append(list(live.values()) + ([unidentified] if unidentified is not None else []))
            k += 1
        if i == len(events):
            break
        ptr, d = events[i]
        if d > 0:
            if ptr in live:  # a free the stream missed: the older allocation ends here
                live[ptr].freed = i
            allocation = live[ptr] = _Allocation(d, i)
        else:
            allocation = live.pop(ptr)
            allocation.freed = i
            allocation.size = -d  # the allocator's own size wins over the storage's
        by_event.append(allocation)
    start = sum(a.size for a in older)
    if unidentified is not None:
        unidentified.size = stream.allocated_at_start - start
        start = stream.allocated_at_start
    for allocation in set(by_event) | set(older):
        allocation.resolve()
    return _Ledger(by_event, live_at_mark, start)


def _attribute(stream: AllocationStream, observations: list[dict[int, tuple[str, int]]],
               labels: list[str]) -> tuple[list[int], dict[str, list[int]], list[Moment]]:
    """Measured bytes after every allocator event, each category's bytes at the same points, and
    the moment of every mark; the categories add up to the measured bytes everywhere."""
    ledger = _ledger(stream, observations)
    mark_at = [p for _, p in stream.marks]
    n = mark_at[-1]
    events = stream.events[:n]
    measured = [ledger.start] * (n + 1)
    for i, (_, d) in enumerate(events):
        measured[i + 1] = measured[i] + d
    series = {c: [0] * (n + 1) for c in ALLOCATED}
    moments = []
    for k, pos in enumerate(mark_at):
        totals = dict.fromkeys(ALLOCATED, 0)
        for allocation in ledger.live_at_mark[k]:
            totals[allocation.category(k)] += allocation.size
        moments.append(Moment(labels[k], dict(totals), measured[pos], pos))
        for c in ALLOCATED:
            series[c][pos] = totals[c]
        end = mark_at[k + 1] if k + 1 < len(mark_at) else n
        for i in range(pos, end):
            allocation = ledger.by_event[i]
            totals[allocation.category(k)] += allocation.size if events[i][1] > 0 else -allocation.size
            for c in ALLOCATED:
                series[c][i + 1] = totals[c]
    return measured, series, moments


# ---------------------------------------------------------------- the public function


def default_setup(device: str | torch.device = "cpu") -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    """A small MLP classifier, Adam and a batch (inputs, class targets): what `budget()` measures
    when given nothing (with cross-entropy as the loss)."""
    model, gen = seeded_mlp((256, 512, 512, 10), torch.nn.GELU, scale=0.05, seed=0)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(512, 256, generator=gen).to(device)
    targets = torch.randint(0, 10, (512,), generator=gen).to(device)
    return model, optimizer, (inputs, targets)


def _model_device(model: torch.nn.Module) -> torch.device | None:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return None


def budget(
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    batch: Any = None,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    device: str | None = None,
    *,
    step: Callable[[], Any] | None = None,
    accumulate: int = 1,
    autocast: torch.dtype | None = None,
    set_to_none: bool = True,
    warmup: bool = True,
) -> Budget:
    """Measure one steady-state training step, allocation by allocation, and name every byte.

    Given nothing: a small MLP classifier with Adam and cross-entropy (`default_setup`).
    Otherwise `model` and `optimizer`, and either `batch` (+ `loss_fn`) in one of the forms in
    the module docstring, or `step`, a callable doing forward, loss, backward and
    `optimizer.step()` itself (a `batch` given with it counts as application references).
    With a batch: `accumulate=k` cuts it into k micro-batches (loss ÷ k, one backward each,
    one optimizer step); `autocast=torch.bfloat16` runs forward and loss under
    `torch.autocast`; `set_to_none` is passed to `zero_grad`, called first. The step runs once
    to warm up (optimizers create their state lazily) unless `warmup=False`. With a model and
    batch on the meta device (or `device="meta"` and nothing else) nothing runs on data: the
    same categories are predicted from the storages each op makes, for models that do not fit.
    """
    if model is None and optimizer is None and batch is None and step is None:
        model, optimizer, batch = default_setup(_device(device or "cpu"))
        loss_fn = loss_fn or torch.nn.functional.cross_entropy
    dev, run = _step_to_measure(model, optimizer, batch, loss_fn, device, step, accumulate, autocast, set_to_none)
    rec = _record(model, optimizer, dev, batch, run, warmup)
    return _assemble(model, dev, rec, "micro-batch" if step is None else "pass")


def _step_to_measure(
    model: Any, optimizer: Any, batch: Any, loss_fn: Callable[..., torch.Tensor] | None, device: str | None,
    step: Callable[[], Any] | None, accumulate: int, autocast: torch.dtype | None, set_to_none: bool,
) -> tuple[torch.device, Callable[[], Any]]:
    """The device and the step to run, after checking budget()'s arguments (BudgetInputError if wrong)."""
    if not isinstance(model, torch.nn.Module):
        raise BudgetInputError(f"model is a {type(model).__name__}, not a torch.nn.Module: pass model and optimizer "
                               f"(or nothing, for the default). {FORMS}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise BudgetInputError(f"optimizer is a {type(optimizer).__name__}, not a torch.optim.Optimizer: the budget "
                               f"needs it for the optimizer state and the step hooks. {FORMS}")
    where = _model_device(model)
    dev = _device(device or (str(where) if where is not None else "cpu"))
    if where is not None and where.type != dev.type:
        raise BudgetInputError(f"the model is on {where} but device={str(dev)!r}: move the model, or pass "
                               f"device={str(where)!r}.")
    if not isinstance(accumulate, int) or accumulate < 1:
        raise BudgetInputError("accumulate must be a positive int (micro-batches per optimizer step), "
                               f"not {accumulate!r}.")
    if step is not None:
        if not callable(step):
            raise BudgetInputError(f"step is a {type(step).__name__}, not a callable. {FORMS}")
        if loss_fn is not None or accumulate != 1 or autocast is not None:
            raise BudgetInputError("with step=, the step does its own loss, accumulation and autocast: leave "
                                   "loss_fn, accumulate and autocast unset.")
        return dev, step
    if batch is None:
        raise BudgetInputError(f"no batch and no step: pass one. {FORMS}")
    _split_batch(batch)
    _check_loss_fn(loss_fn, batch)
    return dev, _builtin_step(model, optimizer, batch, loss_fn, accumulate, autocast, set_to_none, dev)


def _record(model: torch.nn.Module, optimizer: torch.optim.Optimizer, dev: torch.device, held: Any,
            run: Callable[[], Any], warmup: bool) -> _Recorder:
    """Run the step (after a warm-up run) under the allocation probe and the recorder's marks."""
    # the warm-up runs under the probe too: the CPU profiler reports the free of an allocation
    # only if it saw the allocation, and the step frees what the previous step left (gradients)
    meta = dev.type == "meta"
    with gc_paused(), (_MetaStream() if meta else measure(dev, allocations=True, collect=False)) as probe:
        rec = _Recorder(model, optimizer, dev, held, run, probe)
        if warmup:
            with _quiet_stderr():  # the CPU allocator warns when it frees memory older than the profiler
                run()
        rec.mark("start")
        if meta:
            probe.watch(rec.start_weak, rec.observations[0])
        with rec.watching(model), rec:
            rec.run()
        rec.mark("end")
    if rec.passes == 0:
        raise BudgetInputError("the step ran no backward pass: it must call loss.backward() (or "
                               f"torch.autograd.backward / grad). {FORMS}")
    return rec


def _assemble(model: torch.nn.Module, dev: torch.device, rec: _Recorder, word: str) -> Budget:
    """The Budget from what the recorder saw: every byte named, the peak and its breakdown, the notes."""
    meta = dev.type == "meta"
    measurement = None if meta else rec.probe.result
    stream, unreported = (rec.probe.stream() if meta else measurement.allocations), 0
    if dev.type == "cpu":
        stream, unreported = _fill_unreported(stream, rec.observations, rec.gone)
    live, series, moments = _attribute(stream, rec.observations, _labels(rec.labels, rec.passes, word))
    reserve = [0] * len(live)  # the allocator's reserve after each event: reserved − allocated
    if stream.reserved is not None:
        reserve = [stream.reserved_at_start - live[0]] + [r - a for r, a in zip(stream.reserved, live[1:])]
    for moment in moments:
        moment.bytes["allocator reserve"] = reserve[moment.position]
    timeline, peak = _with_peak(moments, live, series, reserve)
    own_peaks = {c: max(series[c]) for c in ALLOCATED}
    own_peaks["allocator reserve"] = max(reserve)
    series["allocator reserve"] = reserve
    source = META_SOURCE if meta else measurement.source
    if unreported:
        source += (f"; {unreported} frees of memory allocated before the measurement, which the profiler does "
                   "not report, placed at the first mark that found them gone")
    return Budget(str(dev), timeline, peak.live, peak.label, dict(peak.bytes), own_peaks, source, measurement,
                  live, series, _notes(model, dev))


def _with_peak(moments: list[Moment], live: list[int], series: dict[str, list[int]],
               reserve: list[int]) -> tuple[list[Moment], Moment]:
    """The timeline with the peak marked, a moment of its own where it falls between two marks."""
    peak_at = max(range(len(live)), key=live.__getitem__)
    timeline = list(moments)
    same = [m for m in moments if m.position == peak_at]
    if same:
        peak = same[-1]
    else:
        k = max(i for i, m in enumerate(moments) if m.position < peak_at)
        peak = Moment(f"peak, {_phase(moments[k].label, moments[k + 1].label)}",
                      {c: series[c][peak_at] for c in ALLOCATED}, live[peak_at], peak_at)
        peak.bytes["allocator reserve"] = reserve[peak_at]
        timeline.insert(timeline.index(moments[k]) + 1, peak)
    peak.peak = True
    return timeline, peak


def _notes(model: torch.nn.Module, dev: torch.device) -> dict[str, str]:
    """What each category holds in this budget: the definitions, with this model's and device's specifics."""
    notes = dict(DEFINITIONS)
    buffers = sum(b.untyped_storage().nbytes() for b in model.buffers())
    if buffers:
        notes["parameters"] += f" — here {format_bytes(buffers)} of buffers"
    if dev.type == "cpu":
        notes["allocator reserve"] = "0 on CPU (no caching allocator); on CUDA reserved − allocated"
        notes["unattributed"] += "; on CPU the step's start is the identified bytes (the allocator reports changes)"
    if dev.type == "meta":
        notes["allocator reserve"] = "none on the meta device (no allocator)"
    return notes


_RULE = re.compile(r"(^|: )backward \d+: ")


def _phase(before: str, after: str) -> str:
    """Where a point between two marks is, in words."""
    if _RULE.search(before):
        return f"in {before}"
    if before.endswith("optimizer step begins"):
        return "in the optimizer step"
    if after.endswith("after forward"):
        return f"in {after.removesuffix('after forward')}forward"
    if after.endswith("after zero_grad"):
        return "in zero_grad"
    return f"between '{before}' and '{after}'"


def _labels(marks: list[tuple[str, int]], passes: int, word: str) -> list[str]:
    """Mark labels, with the backward pass they belong to when the step ran more than one."""
    if passes == 1:
        return [label for label, _ in marks]
    return [f"{word} {n}/{passes}: {label}" if n else label for label, n in marks]
