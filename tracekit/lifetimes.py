"""Lifetimes, once: when autograd released each residual, when its storage's memory went away,
and who holds it after backward. The predictor (predict.py, from the graph's structure) and
the observer (observe.py, from a real backward) both produce a `Lifetimes`; every view (the
drawing, the tables, the text, the lab, diff) reads one and works out nothing of its own."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """A whole backward's lifetimes: the reverse order (node index per step), one Lifetime per
    residual (in the trace's residual order), what each step released (residual indexes) and
    freed (storage indexes), whether the graph was retained, and the error if backward raised."""

    kind: str
    order: tuple[int, ...]
    residuals: tuple[Lifetime, ...]
    released: tuple[tuple[int, ...], ...]  # per step
    freed: tuple[tuple[int, ...], ...]  # per step
    retained: bool = False
    error: str | None = None

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
        return f"user variable {name}"
    return None


def fixed_note(record: Record, i: int) -> str | None:
    """The lifetime of residual i when it has no steps to give (recomputed, gone before tracing,
    modified in place), else None: the same for a prediction and an observation."""
    row = record.residuals[i]
    if row.place is HeldIn.RECOMPUTED:
        return RECOMPUTED
    if row.status is Status.RELEASED:
        return GONE
    if row.status is Status.MODIFIED:
        by = ", ".join(str(m) for m in row.modified_by) or "an in-place op"
        return f"modified in place by {by}: saved at version {row.saved_version}, now {row.version}"
    return None


def storage_holder(record: Record, k: int) -> str | None:
    """What keeps storage k alive after backward, from what the record knows (None: nothing)."""
    s = record.storages[k]
    return holder(s.names, s.is_parameter, s.is_output, s.leaf_role.value if s.leaf_role is not None else None)
