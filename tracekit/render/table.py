"""The trace as text and as a table: the same facts as the drawing, renderer-independent."""

from __future__ import annotations

import html
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ..lifetimes import Lifetime
from ..model import HeldIn, Residual, Trace
from ..storage import format_bytes

COLUMNS = ("node", "slot", "shape", "dtype", "visible", "pinned", "role", "rule", "free point")


def _shape(r: Residual) -> str:
    return "?" if r.shape is None else "(" + ", ".join(map(str, r.shape)) + ")"


def residual_row(r: Residual, lifetime: Lifetime | None = None) -> tuple[str, ...]:
    """One residual as table cells (`lifetime`: its lifetime from trace.lifetimes(), read if not given)."""
    lifetime = lifetime or r.lifetime
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
        lifetime.words() + where,
    )


@dataclass
class Table:
    """Rows with headers; HTML in Jupyter, aligned text elsewhere."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]

    def __str__(self) -> str:
        return aligned(self.columns, self.rows)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return html_table(self.columns, self.rows)


def aligned(columns: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Columns and rows as plain text, each column padded to its widest cell."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += [indent + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


HIGHLIGHT = "#ffe08a"  # the background of a highlighted row


def html_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    caption: str | None = None,
    *,
    row_headers: bool = False,
    definitions: Iterable[tuple[str, str]] = (),
    css_class: str | None = None,
    highlight: Collection[int] = (),
) -> str:
    """An HTML table of text cells, every string escaped and every cell left-aligned.

    `caption`: above the table; one of several lines (split at newlines) is left-aligned.
    `row_headers`: the first cell of each row is its header. `definitions`: (term, meaning)
    pairs listed in one full-width row above the column headers. `css_class`: the table's
    class. `highlight`: indexes of the rows to highlight.
    """
    esc = html.escape
    opening = "<table>" if css_class is None else f"<table class='{esc(css_class)}'>"
    if caption is not None:
        lines = caption.split("\n")
        style = " style='text-align:left'" if len(lines) > 1 else ""
        opening += f"<caption{style}>{'<br>'.join(esc(line) for line in lines)}</caption>"
    head = ""
    terms = "".join(f"<li><b>{esc(term)}</b>: {esc(meaning)}</li>" for term, meaning in definitions)
    if terms:
        head += f"<tr><td colspan='{len(columns)}' style='text-align:left'><ul style='margin:0'>{terms}</ul></td></tr>"
    head += "<tr>" + "".join(f"<th>{esc(c)}</th>" for c in columns) + "</tr>"
    body = []
    for i, row in enumerate(rows):
        cells = [f"<td style='text-align:left'>{esc(v)}</td>" for v in row]
        if row_headers and cells:
            cells[0] = f"<th style='text-align:left'>{esc(row[0])}</th>"
        style = f" style='background:{HIGHLIGHT}'" if i in highlight else ""
        body.append(f"<tr{style}>{''.join(cells)}</tr>")
    return f"{opening}<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


def residual_table(trace: Trace) -> Table:
    """Every residual with its bytes, role, rule and free point."""
    return Table(COLUMNS, _rows(trace))


def _rows(trace: Trace) -> list[tuple[str, ...]]:
    lifetimes = trace.lifetimes().residuals
    return [residual_row(r, lifetimes[r.index]) for r in trace.residuals]


def _inputs(inputs: tuple[int | str, ...]) -> str:
    return ", ".join(f"#{i}" if type(i) is int else i for i in inputs)


def trace_text(trace: Trace) -> str:
    """The whole trace in plain text: forward ops, residuals, observed reverse steps."""
    out = [f"trace: {trace.summary()}"]
    out.append("forward (execution order)")
    fwd = [
        (f"#{n.index}", n.op, n.name, n.source or "-", _inputs(n.inputs))
        for n in trace.nodes
    ]
    out.append(aligned(("node", "op", "backward", "source", "inputs"), fwd, "  "))
    notes: dict[str, list[str]] = {}
    for n in trace.nodes:
        if n.note:
            notes.setdefault(n.note, []).append(f"#{n.index}")
    if notes:
        out.append("notes")
        out += [f"  {', '.join(where)}: {note}" for note, where in notes.items()]
    out.append("residuals")
    if trace.residuals:
        out.append(aligned(COLUMNS, _rows(trace), "  "))
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
        out.append(aligned(("step", "rule", "used", "released", "freed"), rows, "  "))
        if trace.error:
            out.append(f"  backward raised: {trace.error}")
    else:
        out.append(f"reverse: not observable ({trace.without_data} tensors): call .predict_backward()"
                   if trace.without_data else "reverse: not run yet (call .backward() to observe it)")
    return "\n".join(out)
