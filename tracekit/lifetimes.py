"""Lifetimes, once: when autograd released each residual, when its storage's memory went away,
and who holds it after backward. The predictor (predict.py, from the graph's structure) and
the observer (observe.py, from a real backward) both produce a `Lifetimes`; every view (the
drawing, the tables, the text, the lab, diff) reads one and works out nothing of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .rows import HeldIn, Record, Status

PREDICTED, OBSERVED = "predicted", "observed"
RETAINED = "the retained graph (retain_graph=True)"
OUTSIDE = "a live reference outside this graph (another graph or a Python object)"
RECOMPUTED = "not kept: recomputed in backward"
GONE = "already freed before tracing"


@dataclass(frozen=True, slots=True)
class Lifetime:
    """One residual's lifetime: the reverse step after which autograd released it, the step
    after which its memory was gone, what still holds it after backward; `note` replaces the
    steps when there are none to give (recomputed, modified in place, gone before tracing)."""

    kind: str  # PREDICTED or OBSERVED
    released_at: int | None = None
    freed_at: int | None = None
    held_by: str | None = None
    note: str | None = None

    def words(self) -> str:
        """The lifetime in words, e.g. `released after step 3; freed after step 5 (predicted)`."""
        if self.note is not None:  # a fact, not a prediction
            return self.note
        parts = []
        if self.released_at is not None:
            parts.append(f"released after step {self.released_at}")
        if self.freed_at is not None:
            parts.append(f"freed after step {self.freed_at}")
        elif self.held_by:
            parts.append(f"held by {self.held_by}")
        text = "; ".join(parts) or "live (backward not run)"
        return f"{text} ({PREDICTED})" if self.kind == PREDICTED else text


class Lifetimes:
    """A whole backward's lifetimes: the reverse order (node index per step), one Lifetime per
    residual (in the trace's residual order), what each step released (residual indexes) and
    freed (storage indexes), whether the graph was retained, and the error if backward raised.
    `residuals` may be given as a function that makes them: they are made when first read."""

    __slots__ = ("kind", "order", "_residuals", "released", "freed", "retained", "error")

    def __init__(self, kind: str, order: tuple[int, ...],
                 residuals: tuple[Lifetime, ...] | Callable[[], tuple[Lifetime, ...]],
                 released: tuple[tuple[int, ...], ...], freed: tuple[tuple[int, ...], ...],
                 retained: bool = False, error: str | None = None) -> None:
        self.kind, self.order, self._residuals = kind, order, residuals
        self.released, self.freed = released, freed  # per step
        self.retained, self.error = retained, error

    @property
    def residuals(self) -> tuple[Lifetime, ...]:
        """One Lifetime per residual, in the trace's residual order."""
        made = self._residuals
        if callable(made):
            made = self._residuals = made()
        return made

    def _fields(self) -> tuple[Any, ...]:
        return (self.kind, self.order, self.residuals, self.released, self.freed, self.retained, self.error)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lifetimes) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Lifetimes, self._fields())

    def __repr__(self) -> str:
        return (f"Lifetimes(kind={self.kind!r}, order={self.order!r}, residuals={self.residuals!r}, "
                f"released={self.released!r}, freed={self.freed!r}, retained={self.retained!r}, "
                f"error={self.error!r})")

    @property
    def predicted(self) -> bool:
        """True for lifetimes worked out from the graph's structure (no backward ran)."""
        return self.kind == PREDICTED


def holder(names: tuple[str, ...], is_parameter: bool, is_output: bool, leaf_role: str | None) -> str | None:
    """What keeps a storage alive after backward, from what the trace knows (None: nothing)."""
    name = names[0] if names else None
    if is_parameter:
        word = leaf_role or "parameter"
        return f"{word} {name}" if name else f"a leaf ({word})"
    if is_output:
        return f"output {name} (a live tensor)" if name else "the traced output (a live tensor)"
    if name:
        if name.startswith("buffer "):  # frames.BUFFER: a module's buffer, e.g. BatchNorm's running_mean
            return f"the module's {name}"
        if " (in the closure of " in name:  # frames.CLOSURE
            var, _, function = name.partition(" (in the closure of ")
            return f"the closure of {function.rstrip(')')} (its {var})"
        return f"user variable {name}"
    return None


def fixed_note(record: Record, i: int) -> str | None:
    """The lifetime of residual i when it has no steps to give (recomputed, gone before tracing,
    modified in place), else None: the same for a prediction and an observation."""
    c = record.residual_columns
    if c.place[i] is HeldIn.RECOMPUTED:
        return RECOMPUTED
    status = c.status[i]
    if status is Status.RELEASED:
        return GONE
    if status is Status.MODIFIED:
        by = ", ".join(str(m) for m in c.modified_by[i]) or "an in-place op"
        return f"modified in place by {by}: saved at version {c.saved_version[i]}, now {c.version[i]}"
    return None


def storage_holder(record: Record, k: int) -> str | None:
    """What keeps storage k alive after backward, from what the record knows (None: nothing)."""
    c = record.storage_columns
    role = c.leaf_role[k]
    return holder(c.names[k], c.is_parameter[k], c.is_output[k], role.value if role is not None else None)
