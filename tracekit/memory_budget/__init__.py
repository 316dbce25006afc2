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

from collections.abc import Callable
from typing import Any

import torch

from ..errors import BudgetInputError
from ..keeper import gc_paused
from ..memory import _quiet_stderr, check_device, measure
from ..models import seeded_mlp
from ..storage import format_bytes
from .inputs import FORMS, TARGET_KEYS, _builtin_step, _check_loss_fn, _split_batch
from .ledger import _attribute, _fill_unreported
from .recorder import META_SOURCE, _MetaStream, _StepRecorder
from .result import ALLOCATED, CATEGORIES, DEFINITIONS, Budget, Moment, _labels, _phase

__all__ = [
    "ALLOCATED", "CATEGORIES", "DEFINITIONS", "FORMS", "META_SOURCE", "TARGET_KEYS", "Budget", "BudgetInputError",
    "Moment", "budget", "default_setup",
]

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def _device(name: str) -> torch.device:
    """The device to budget on: cpu or cuda (measured), or meta (predicted without data)."""
    return torch.device("meta") if torch.device(name).type == "meta" else check_device(name)


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
            run: Callable[[], Any], warmup: bool) -> _StepRecorder:
    """Run the step (after a warm-up run) under the allocation probe and the recorder's marks."""
    # the warm-up runs under the probe too: the CPU profiler reports the free of an allocation
    # only if it saw the allocation, and the step frees what the previous step left (gradients)
    meta = dev.type == "meta"
    with gc_paused(), (_MetaStream() if meta else measure(dev, allocations=True, collect=False)) as probe:
        rec = _StepRecorder(model, optimizer, dev, held, run, probe)
        if warmup:
            with _quiet_stderr():  # the CPU allocator warns when it frees memory older than the profiler
                run()
        rec.mark("start")
        if meta:
            probe.watch(rec.holders.start_weak, rec.observations.first)
        with rec.watching(model), rec:
            rec.run()
        rec.mark("end")
    if rec.passes == 0:
        raise BudgetInputError("the step ran no backward pass: it must call loss.backward() (or "
                               f"torch.autograd.backward / grad). {FORMS}")
    return rec


def _assemble(model: torch.nn.Module, dev: torch.device, rec: _StepRecorder, word: str) -> Budget:
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
