"""Errors as evidence: PyTorch's two lifetime errors with what tracekit knows about them.

`with tk.explain():` around user code records the forward as capture does and traces each graph
as backward is called on it (observing the backward); when PyTorch raises "Trying to backward
through the graph a second time" or "one of the variables needed for gradient computation has
been modified by an inplace operation", a PEP 678 note is added: the residual the rule needed
(node, slot, shape, source line), the backward step that released it or the in-place call that
bumped its version (saved vs current version), and what each fix costs on this program (the
bytes retain_graph keeps, the bytes a clone keeps, recomputing the forward). PyTorch's message
stays first and unchanged. `tk.explain(err)` does the same after the fact, from the graph the
error's traceback still holds (no source lines, no observed steps: what it cannot know it says).
"""

from __future__ import annotations

import textwrap
from collections import OrderedDict
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

from .capture import CaptureSession, trace
from .errors import TracekitError
from .frames import user_frame, where
from .internals import SEQUENCE_NR, backward_outputs
from .reader import Residual
from .rows import Mutation, Status
from .storage import format_bytes
from .trace import Trace

SECOND_TIME = "Trying to backward through the graph a second time"
INPLACE = "one of the variables needed for gradient computation has been modified by an inplace operation"
HEAD = "tracekit:"  # every note starts so; an error is explained once
WIDTH = 100  # characters per line of a note
KEEP = 8  # graphs remembered per explain block (their traces hold the graph's nodes, not its saved values)


@dataclass
class _Backward:
    """One backward call seen under explain: its trace (observed when it could be) and its line."""

    trace: Trace
    line: str | None
    call: str  # `backward()` or `torch.autograd.grad()`


def _shape(r: Residual) -> str:
    if r.shape is None:
        return "shape unknown (freed before tracing)"
    return f"({', '.join(map(str, r.shape))}) {r.dtype}, {format_bytes(r.nbytes)}"


def _saved_at(r: Residual) -> str:
    where_ = f" at {r.node.source}" if r.node.source else ""
    module = f" in {r.node.module}" if r.node.module else ""
    return f"saved by `{r.node.op}`{where_}{module}"


def _first_needed(tr: Trace, status: Status) -> Residual | None:
    """The residual in `status` that the engine reaches first: the first rule, in reverse order,
    that reads one."""
    for step in tr.predict_backward().steps:
        for r in step.node.reads():
            if r.status is status:
                return r
    return None


def _ops_range(tr: Trace) -> str:
    lines = [n.source for n in tr.nodes if n.source]
    span = "" if not lines else f", {lines[0]}" if lines[0] == lines[-1] else f", {lines[0]} … {lines[-1]}"
    return f"{len(tr.nodes)} ops{span}"


@dataclass(frozen=True)
class Fix:
    """One way out of the error and what it costs on this program (bytes kept alive, None where
    not measured)."""

    name: str  # retain_graph, recompute, clone, out-of-place
    keeps: int | None = None  # bytes it keeps alive
    storages: int | None = None  # in how many storages


@dataclass(frozen=True)
class Explanation:
    """What tracekit knows about one lifetime error, as data (the note is its text)."""

    kind: str  # "second" (backward a second time) or "inplace" (modified by an inplace operation)
    residual: Residual | None  # the residual the rule needed (None: none reads so)
    shown: Residual | None = None  # the same residual as the earlier trace saw it (its shape, source)
    earlier_call: str | None = None  # `backward()` or `torch.autograd.grad()`, when explain saw it
    earlier_line: str | None = None
    released_after: int | None = None  # the earlier backward's observed step that released it
    released_by: str | None = None  # that step's rule, `#1 ExpBackward0`
    mutations: tuple[Mutation, ...] = ()  # the in-place calls on its storage since it was saved
    fixes: tuple[Fix, ...] = ()


def second_time(now: Trace, earlier: _Backward | None) -> Explanation:
    """"Backward through the graph a second time" as data: which residual, who released it, what
    retain_graph or recomputing costs."""
    r = _first_needed(now, Status.RELEASED)
    if r is None:
        return Explanation("second", None)
    before = None
    if earlier is not None:
        node = earlier.trace.nodes[r.node.index] if r.node.index < len(earlier.trace.nodes) else None
        before = next((x for x in node.residuals if x.slot == r.slot), None) if node is not None else None
    first = earlier.trace if earlier is not None else None
    recompute = Fix("recompute", 0, 0)
    if first is not None and first.steps and before is not None and before.released_at is not None:
        step = first.steps[before.released_at]
        freed = [s for st in first.steps for s in st.freed]
        return Explanation("second", r, before, earlier.call, earlier.line, step.index,
                           f"#{step.node.index} {step.node.name}",
                           fixes=(Fix("retain_graph", sum(s.nbytes for s in freed), len(freed)), recompute))
    if earlier is not None:
        kept = earlier.trace.graph_owned_storages()
        return Explanation("second", r, before or r, earlier.call, earlier.line,
                           fixes=(Fix("retain_graph", sum(s.nbytes for s in kept), len(kept)), recompute))
    return Explanation("second", r, r, fixes=(Fix("retain_graph"), recompute))


def second_time_note(now: Trace, earlier: _Backward | None) -> str:
    """The note for "backward through the graph a second time" (second_time's facts in words)."""
    return _second_time_text(second_time(now, earlier), now)


def _second_time_text(e: Explanation, now: Trace) -> str:
    r, shown = e.residual, e.shown
    if r is None or shown is None:
        return f"{HEAD} no residual of this graph reads as released; nothing more to say."
    lines = [f"{HEAD} this backward needed {r.label} ({_shape(shown)}), {_saved_at(shown)}."]
    retain = next(f for f in e.fixes if f.name == "retain_graph")
    if e.released_after is not None:
        lines.append(f"  The first {e.earlier_call}{_at(e.earlier_line)} released it after step {e.released_after} "
                     f"({e.released_by}'s rule ran).")
        lines.append("  Fixes, measured on this program:")
        lines.append(f"  - retain_graph=True on the first {e.earlier_call}: keeps {format_bytes(retain.keeps or 0)} "
                     f"({_count(retain.storages or 0)} it freed) alive until the graph is dropped.")
    elif e.earlier_call is not None:
        lines.append(f"  The earlier {e.earlier_call}{_at(e.earlier_line)} released it (not observed: "
                     "torch.autograd.grad runs unwatched).")
        lines.append("  Fixes, measured on this program:")
        lines.append(f"  - retain_graph=True on the first call: keeps {format_bytes(retain.keeps or 0)}"
                     f" ({_count(retain.storages or 0)} only the graph holds) alive until the graph is dropped.")
    else:
        lines.append("  An earlier backward released it (traced after the fact: which step, and the bytes "
                     "retain_graph would keep, need `with tk.explain():` around the program).")
        lines.append("  Fixes:")
        lines.append("  - retain_graph=True on the first backward: keeps every residual alive until the graph is "
                     "dropped.")
    lines.append(f"  - recompute the forward ({_ops_range(now)}) and backward the new graph: keeps 0 B between "
                 "the two backwards, costs the forward's compute again.")
    return _wrapped(lines)


def _wrapped(lines: list[str]) -> str:
    """The note's lines within WIDTH characters (a continuation indented under its line)."""
    out = []
    for line in lines:
        lead = " " * (len(line) - len(line.lstrip(" ")) + (2 if line.lstrip().startswith("- ") else 0))
        out += textwrap.wrap(line, WIDTH, subsequent_indent=lead or "  ", break_on_hyphens=False)
    return "\n".join(out)


def _count(n: int) -> str:
    return f"{n} storage{'' if n == 1 else 's'}"


def _at(line: str | None) -> str:
    return f" at {line}" if line else ""


def inplace(now: Trace) -> Explanation:
    """"Modified by an inplace operation" as data: which residual, which calls bumped its version,
    what a clone or an out-of-place call costs."""
    r = _first_needed(now, Status.MODIFIED)
    if r is None:
        return Explanation("inplace", None)
    return Explanation("inplace", r, r, mutations=tuple(r.modified_by),
                       fixes=(Fix("clone", r.nbytes, 1), Fix("out-of-place", r.pinned_nbytes or r.nbytes, 1)))


def inplace_note(now: Trace) -> str:
    """The note for "modified by an inplace operation" (inplace's facts in words)."""
    return _inplace_text(inplace(now))


def _inplace_text(e: Explanation) -> str:
    r = e.residual
    if r is None:
        return f"{HEAD} no residual of this graph reads as modified; nothing more to say."
    lines = [f"{HEAD} {r.label} ({_shape(r)}), {_saved_at(r)}, was saved at version {r.saved_version} "
             f"and is now at version {r.version}."]
    calls = list(e.mutations)
    if calls:
        lines.append("  In-place calls on its storage since: " + "; ".join(str(m) for m in calls) + ".")
    else:
        lines.append("  The in-place call ran unwatched (outside `with tk.explain():`).")
    first = calls[-1] if calls else None
    name = f"`{first.call}`" if first else "the in-place call"
    clone, fresh = e.fixes
    lines.append("  Fixes, measured on this program:")
    lines.append(f"  - clone before {name} (or save a clone): keeps {format_bytes(clone.keeps or 0)} more, until "
                 "backward releases it.")
    plain = first.call[:-1] if first and first.call.endswith("_") and not first.call.startswith("_") else None
    instead = f"`{plain}`" if plain and hasattr(torch.Tensor, plain) else "an out-of-place op"
    lines.append(f"  - {instead} instead of {name}{_at(first.source if first else None)}: a new "
                 f"{format_bytes(fresh.keeps or 0)} allocation; the saved value stays as it was.")
    lines.append("  - retain_graph does not help: the saved value itself changed.")
    return _wrapped(lines)


def _noted(err: BaseException) -> bool:
    return any(str(n).startswith(HEAD) for n in getattr(err, "__notes__", ()))


def _add_note(err: BaseException, note: str) -> None:
    if hasattr(err, "add_note"):
        err.add_note(note)
    else:  # Python 3.10: the attribute PEP 678 defines, which tracebacks there do not print
        err.__notes__ = [*getattr(err, "__notes__", []), note]  # type: ignore[attr-defined]


def _kind(err: BaseException) -> str | None:
    text = str(err)
    if not isinstance(err, RuntimeError):
        return None
    return "second" if SECOND_TIME in text else "inplace" if INPLACE in text else None


def _note_for(err: BaseException, now: Trace, earlier: _Backward | None) -> None:
    kind = _kind(err)
    if kind is None or _noted(err):
        return
    facts = second_time(now, earlier) if kind == "second" else inplace(now)
    err.tracekit_explanation = facts  # type: ignore[attr-defined]  # explanation_of(err) reads it
    _add_note(err, _second_time_text(facts, now) if kind == "second" else _inplace_text(facts))


def explanation_of(err: BaseException) -> Explanation | None:
    """What tk.explain found about `err`, as data (None for an error it did not explain)."""
    return getattr(err, "tracekit_explanation", None)


def _outputs(args: tuple[Any, ...], kwargs: dict[str, Any], func: Any) -> list[torch.Tensor]:
    if func is torch.Tensor.backward:
        value: Any = args[0] if args else kwargs.get("self")
    else:
        value = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
    values = [value] if isinstance(value, torch.Tensor) else list(value or ())
    return [t for t in values if isinstance(t, torch.Tensor) and t.grad_fn is not None]


class Explain:
    """The context manager `tk.explain()` returns."""

    def __init__(self) -> None:
        self.recording = CaptureSession(self._backward)
        self.seen: OrderedDict[tuple[Any, ...], _Backward] = OrderedDict()

    def __enter__(self) -> Explain:
        self.recording.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.recording.stop()
        if err is not None and not _noted(err):
            explain(err)  # raised where this block could not watch: explained from its traceback

    def _backward(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        outputs = _outputs(args, kwargs, func)
        if not outputs:
            return func(*args, **kwargs)
        # the outputs' nodes by identity and sequence number: holding the nodes themselves would keep a
        # retained graph, and its saved values, alive for as long as it is remembered
        key = tuple((id(t.grad_fn), SEQUENCE_NR(t.grad_fn)) for t in outputs)
        line = where(user_frame())
        try:
            now = self.recording.trace(*outputs)
        except TracekitError:
            return func(*args, **kwargs)
        earlier = self.seen.get(key)
        observe = func is not torch.autograd.grad and kwargs.get("inputs") is None and len(args) <= 1
        call = "torch.autograd.grad()" if func is torch.autograd.grad else "backward()"
        try:
            if observe:
                gradient = kwargs.get("gradient", kwargs.get("grad_tensors"))
                now.backward(gradient, kwargs.get("retain_graph"), kwargs.get("create_graph", False))
                result = None
            else:
                result = func(*args, **kwargs)
        except RuntimeError as err:
            _note_for(err, now, earlier)
            raise
        self.seen[key] = _Backward(now, line, call)
        self.seen.move_to_end(key)
        while len(self.seen) > KEEP:
            self.seen.popitem(last=False)
        return result


def _graph_outputs(err: BaseException) -> list[torch.Tensor]:
    """The tensors a failed backward started from, from the frames its traceback still holds."""
    return [t for t in backward_outputs(err.__traceback__) if t.grad_fn is not None]


def explain(err: BaseException | None = None) -> Any:
    """`with tk.explain():` around a program adds tracekit's note to PyTorch's two lifetime errors
    raised inside it; `tk.explain(err)` adds it to an error already caught and returns the error
    (`raise tk.explain(err)`). Other errors pass unchanged."""
    if err is None:
        return Explain()
    if _kind(err) is None or _noted(err):
        return err
    outputs = _graph_outputs(err)
    if not outputs:
        _add_note(err, f"{HEAD} the graph is not reachable from this error's traceback: run the program "
                       "under `with tk.explain():` to name the residual.")
        return err
    _note_for(err, trace(*outputs), None)
    return err
