"""Two traces of one program, side by side: which residuals each schedule keeps.

`tk.diff(a, b)` pairs the residuals of two traces of the same program (eager vs activation
checkpointing vs a selective-checkpoint policy vs torch.compile, ...) and lists the ones
kept only by a, only by b, and by both, with the bytes each side holds after forward and,
when asked to measure, the peak during backward.

How residuals are paired: a value in the same storage on both sides (a parameter, an input)
is the same value; otherwise a residual is "the k-th `slot` saved by an `op` node" in forward
order (checkpointing keeps eager's graph node for node, so those pair up). A compiled graph
saves its values in one CompiledFunction node: its intermediates pair with nothing and are
listed as only in that side (tracekit does not guess which eager value they equal).

A selective-checkpoint policy (`create_selective_checkpoint_contexts`) keeps the outputs of
the ops it saves in the checkpoint's cache, not in the graph: `checkpoint_cache(trace)`
finds them there, and the diff counts them on that side.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import DiffError
from .reader import Residual
from .render.table import Table
from .rows import CachedValue, HeldIn, Status
from .storage import format_bytes
from .trace import Trace

if TYPE_CHECKING:
    import graphviz

KEPT, RECOMPUTE, ABSENT, PARAMETER, CACHED = "kept", "recomputed", "-", "parameter / input leaf", "kept (SAC cache)"


def checkpoint_cache(trace: Trace) -> list[CachedValue]:
    """The op outputs selective activation checkpointing keeps for this trace's checkpointed
    regions (found when the trace was built, through the checkpoint hooks of its saved tensors;
    empty without SAC)."""
    return list(trace.record.cache)


@dataclass(eq=False)
class DiffRow:
    """One value: what each side does with it."""

    what: str  # e.g. "#2 MmBackward0.self" (the side that has it)
    shape: tuple[int, ...] | None
    dtype: str | None
    a: str  # kept / recomputed / parameter / - (absent)
    b: str
    nbytes: int  # the value's own bytes (visible), known from either side
    a_residual: Residual | None = field(default=None, repr=False)
    b_residual: Residual | None = field(default=None, repr=False)

    @property
    def side(self) -> str:
        """'a', 'b' or 'both': which sides keep it in memory after forward."""
        ka, kb = self.a.startswith(KEPT), self.b.startswith(KEPT)
        return "both" if ka and kb else "a" if ka else "b" if kb else "neither"

    def on(self, side: str) -> tuple[str, Residual | None]:
        """What side 'a' or 'b' does with the value, and its residual there."""
        return (self.a, self.a_residual) if side == "a" else (self.b, self.b_residual)


def _state(r: Residual | None) -> str:
    if r is None:
        return ABSENT
    if r.place is HeldIn.RECOMPUTED:
        return RECOMPUTE
    if r.storage is not None and r.storage.is_parameter:
        return PARAMETER
    if r.status is not Status.LIVE:
        return r.status
    return KEPT if r.place is HeldIn.GRAPH else f"{KEPT} ({r.held_in})"


def _signatures(trace: Trace) -> list[tuple[Any, Residual]]:
    """(pairing key, residual) in forward order: the k-th `slot` saved by an `op` node."""
    count: dict[tuple[str, str], int] = {}
    out = []
    for r in trace.residuals:
        k = (r.node.op, r.slot)
        count[k] = count.get(k, 0) + 1
        out.append(((r.node.op, r.slot, count[k]), r))
    return out


def _pair(a: Trace, b: Trace) -> list[tuple[Residual | None, Residual | None]]:
    """Pair residuals by graph position (op, slot, occurrence), then the rest by shared storage."""
    right = dict(_signatures(b))
    pairs: list[tuple[Residual | None, Residual | None]] = []
    for key, ra in _signatures(a):
        pairs.append((ra, right.pop(key, None)))
    rest = list(right.values())
    by_storage: dict[Any, list[Residual]] = {}
    for rb in rest:
        if rb.storage is not None:
            by_storage.setdefault(rb.storage.key, []).append(rb)
    used: list[Residual] = []
    for i, (ra, rb) in enumerate(pairs):
        if rb is None and ra is not None and ra.storage is not None and by_storage.get(ra.storage.key):
            match = by_storage[ra.storage.key].pop(0)
            pairs[i] = (ra, match)
            used.append(match)
    pairs += [(None, rb) for rb in rest if not any(rb is u for u in used)]
    return pairs


def _activation_bytes(trace: Trace, cache: list[CachedValue]) -> int:
    """Bytes held after forward: storages of kept, non-parameter residuals, plus the SAC cache."""
    keys = {s.key: s.nbytes for s in trace.storages
            if not s.is_parameter and any(_state(r).startswith(KEPT) for r in s.residuals)}
    for c in cache:
        keys.setdefault(c.key, c.nbytes)
    return sum(keys.values())


class TraceDiff:
    """Residuals kept only by a, only by b, by both; bytes after forward; peak if measured."""

    def __init__(self, a: Trace, b: Trace, names: tuple[str, str]) -> None:
        self.a, self.b, self.names = a, b, names
        self.cache_a, self.cache_b = checkpoint_cache(a), checkpoint_cache(b)
        self.rows: list[DiffRow] = []
        self.rows = [self._row(ra, rb) for ra, rb in _pair(a, b)]
        self.held_a = _activation_bytes(a, self.cache_a)
        self.held_b = _activation_bytes(b, self.cache_b)
        self.peak_a: int | None = None  # measured: held after forward + the most backward added on top
        self.peak_b: int | None = None

    @staticmethod
    def _row(ra: Residual | None, rb: Residual | None) -> DiffRow:
        known = next((r for r in (ra, rb) if r is not None and r.shape is not None), ra or rb)
        assert known is not None
        return DiffRow(known.label, known.shape, known.dtype, _state(ra), _state(rb), known.nbytes or 0, ra, rb)

    @property
    def only_a(self) -> list[DiffRow]:
        """Values a keeps in memory after forward and b does not."""
        return [r for r in self.rows if r.side == "a"]

    @property
    def only_b(self) -> list[DiffRow]:
        """Values b keeps in memory after forward and a does not (with b's SAC cache, see cache_b)."""
        return [r for r in self.rows if r.side == "b"]

    @property
    def both(self) -> list[DiffRow]:
        """Values both keep."""
        return [r for r in self.rows if r.side == "both"]

    def table(self, parameters: bool = False) -> Table:
        """Every paired value (parameters and input leaves only if asked) and the SAC caches."""
        a, b = self.names
        rows = []
        for r in self.rows:
            if not parameters and PARAMETER in (r.a, r.b):
                continue
            shape = "?" if r.shape is None else str(tuple(r.shape))
            rows.append((r.what, shape, r.dtype or "?", format_bytes(r.nbytes), r.a, r.b, _where(r.side, a, b)))
        for side, name, _, cache in self._sides():
            cells = (CACHED, ABSENT) if side == "a" else (ABSENT, CACHED)
            for c in cache:
                rows.append((f"{c.op} output", str(c.shape), c.dtype, format_bytes(c.nbytes), *cells, f"only {name}"))
        return Table(("value", "shape", "dtype", "bytes", a, b, "kept by"), rows)

    def summary(self) -> str:
        """Counts, bytes held after forward on each side, and the peaks if measured."""
        a, b = self.names
        line = (f"kept only by {a}: {len(self.only_a)}, only by {b}: {len(self.only_b) + len(self.cache_b)}"
                f"{' (incl. SAC cache)' if self.cache_b else ''}, by both: {len(self.both)}; held after forward: "
                f"{a} {format_bytes(self.held_a)}, {b} {format_bytes(self.held_b)}")
        if self.peak_a is not None and self.peak_b is not None:
            line += f"; peak (measured): {a} {format_bytes(self.peak_a)}, {b} {format_bytes(self.peak_b)}"
        return line

    def text(self) -> str:
        """Summary line and the table as plain text."""
        return f"{self.summary()}\n{self.table()}"

    __repr__ = text

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.summary())}</p>{self.table()._repr_html_()}"

    def draw(self, max_rows: int = 60) -> graphviz.Digraph:
        """Two columns, a's kept values left and b's right; a value both keep is joined by an edge."""
        import graphviz

        g = graphviz.Digraph("diff", graph_attr={"rankdir": "LR", "nodesep": "0.08", "ranksep": "1.2"},
                             node_attr={"shape": "box", "fontname": "Helvetica", "fontsize": "9", "style": "filled"})
        rows = [r for r in self.rows if PARAMETER not in (r.a, r.b) and r.side != "neither"][:max_rows]
        colour = {"both": "#e6e6e6", "a": "#f6c89f", "b": "#a9c7f0"}
        for side, name, held, cache in self._sides():
            with g.subgraph(name=f"cluster_{side}", graph_attr={"label": f"{name}: {format_bytes(held)}"}) as column:
                for i, r in enumerate(rows):
                    state, residual = r.on(side)
                    if state.startswith(KEPT):
                        column.node(f"{side}{i}", _box(residual, r), fillcolor=colour[r.side])
                for j, c in enumerate(cache):
                    column.node(f"c{side}{j}", f"{c.op} output\\n{format_bytes(c.nbytes)} (SAC cache)",
                                fillcolor=colour[side])
        for i, r in enumerate(rows):
            if r.side == "both":
                g.edge(f"a{i}", f"b{i}", arrowhead="none", color="#888888")
        return g

    def _sides(self) -> tuple[tuple[str, str, int, list[CachedValue]], ...]:
        """(side, its name, bytes it holds after forward, its SAC cache) for a, then b."""
        return (("a", self.names[0], self.held_a, self.cache_a), ("b", self.names[1], self.held_b, self.cache_b))

    def svg(self, max_rows: int = 60) -> str:
        """The two-column drawing as SVG (system dot, else the bundled renderer)."""
        from .render.svg import render_svg

        return render_svg(self.draw(max_rows).source)


def _where(side: str, a: str, b: str) -> str:
    return {"both": "both", "a": f"only {a}", "b": f"only {b}"}.get(side, "neither")


def _box(r: Residual | None, row: DiffRow) -> str:
    label = r.label if r is not None else row.what
    shape = "?" if row.shape is None else "×".join(map(str, row.shape)) or "scalar"
    return f"{label}\\n{shape} {row.dtype or '?'}  {format_bytes(row.nbytes)}".replace('"', "'")


def diff(a: Trace, b: Trace, names: tuple[str, str] = ("a", "b"), measure: bool = False) -> TraceDiff:
    """Compare two traces of one program: residuals kept only by a, only by b, by both, bytes
    held after forward, and with `measure=True` (real devices) the measured peak during
    backward (this runs each trace's observed backward once)."""
    for t in (a, b):
        if not isinstance(t, Trace):
            raise DiffError(f"tk.diff compares two traces, got a {type(t).__name__}: "
                            "pass tk.trace(loss) of each schedule.")
    result = TraceDiff(a, b, names)
    if measure:
        from .memory import measure as measure_memory

        peaks = []
        for t, held in ((a, result.held_a), (b, result.held_b)):
            if t.without_data:
                raise DiffError(f"cannot measure a trace of {t.without_data} tensors: use measure=False.")
            if t.steps:
                raise DiffError("measure=True runs each trace's backward, and this one already ran: "
                                "trace the schedule again (a fresh forward) and diff that.")
            device = next((s.device for s in t.storages if not s.is_parameter), "cpu")
            with measure_memory(device) as probe:
                t.backward()
            peaks.append(held + (probe.result.peak if probe.result is not None else 0))
        result.peak_a, result.peak_b = peaks
    return result
