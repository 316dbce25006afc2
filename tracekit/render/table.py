"""The trace as text and as a table: the same facts as the drawing, renderer-independent."""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..model import HeldIn, Residual, Trace
from ..storage import format_bytes

COLUMNS = ("node", "slot", "shape", "dtype", "visible", "pinned", "role", "rule", "free point")


def _shape(r: Residual) -> str:
    return "?" if r.shape is None else "(" + ", ".join(map(str, r.shape)) + ")"


def residual_row(r: Residual) -> tuple[str, ...]:
    """One residual as table cells."""
    where = "" if r.place is HeldIn.GRAPH else f" [{r.held_in}]"
    return (
        f"#{r.node.index} {r.node.name}",
        r.slot,
        _shape(r),
        r.dtype or "?",
        format_bytes(r.nbytes),
        format_bytes(r.pinned_nbytes) if r.storage is not None else "0 B",
        r.role,
        r.rule,
        r.free_point() + where,
    )


@dataclass
class Table:
    """Rows with headers; HTML in Jupyter, aligned text elsewhere."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]

    def __str__(self) -> str:
        return _aligned(self.columns, self.rows)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _aligned(columns: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "") -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += [indent + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def residual_table(trace: Trace) -> Table:
    """Every residual with its bytes, role, rule and free point."""
    return Table(COLUMNS, [residual_row(r) for r in trace.residuals])


def _inputs(inputs: tuple[int | str, ...]) -> str:
    return ", ".join(i if isinstance(i, str) else f"#{i}" for i in inputs)


def trace_text(trace: Trace) -> str:
    """The whole trace in plain text: forward ops, residuals, observed reverse steps."""
    out = [f"trace: {trace.summary()}"]
    out.append("forward (execution order)")
    fwd = [
        (f"#{n.index}", n.op, n.name, n.source or "-", _inputs(n.inputs))
        for n in trace.nodes
    ]
    out.append(_aligned(("node", "op", "backward", "source", "inputs"), fwd, "  "))
    notes: dict[str, list[str]] = {}
    for n in trace.nodes:
        if n.note:
            notes.setdefault(n.note, []).append(f"#{n.index}")
    if notes:
        out.append("notes")
        out += [f"  {', '.join(where)}: {note}" for note, where in notes.items()]
    out.append("residuals")
    if trace.residuals:
        out.append(_aligned(COLUMNS, [residual_row(r) for r in trace.residuals], "  "))
    else:
        out.append("  (none: no rule saved anything)")
    if trace.steps or trace.error:
        kept = " (retain_graph: nothing released)" if trace.retained else ""
        out.append(f"reverse (observed){kept}")
        rows = [
            (
                f"step {s.index}",
                f"#{s.node.index} {s.node.name}",
                ", ".join(r.slot for r in s.used) or "-",
                ", ".join(r.slot for r in s.released) or "-",
                ", ".join(format_bytes(st.nbytes) for st in s.freed) or "-",
            )
            for s in trace.steps
        ]
        out.append(_aligned(("step", "rule", "used", "released", "freed"), rows, "  "))
        if trace.error:
            out.append(f"  backward raised: {trace.error}")
    else:
        out.append(f"reverse: not observable ({trace.without_data} tensors): call .predict_backward()"
                   if trace.without_data else "reverse: not run yet (call .backward() to observe it)")
    return "\n".join(out)
