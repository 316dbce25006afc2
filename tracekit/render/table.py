"""The trace as text and as a table: the same facts as the drawing, renderer-independent.
Text lines stay within `WIDTH` characters and HTML cells wrap, so a table fits a notebook cell."""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ..errors import TableArgumentError
from ..lifetimes import Lifetime, Lifetimes
from ..reader import Residual, Storage, TraceData
from ..rows import HeldIn
from ..storage import format_bytes

WIDTH = 100  # characters: the widest text line a table or trace.text() prints
SORTS = ("forward", "bytes", "pinned")

COLUMNS = ("node", "slot", "shape", "dtype", "visible", "pinned", "role", "rule", "free point")
HEAD = 6  # the columns a residual's first text line holds when the table is too wide for one


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
    """Rows with headers (and an optional caption); HTML in Jupyter, text elsewhere, both wrapped
    to fit a notebook cell (`width` characters of text)."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    caption: str | None = None
    width: int | None = None  # characters; None: one line per row, however wide
    head: int = 0  # > 0: when the columns do not fit `width`, each row is a record (see records)
    wraps: tuple[int, ...] | None = None  # HTML: the columns whose cells wrap (None: every column)

    def __str__(self) -> str:
        body = records(self.columns, self.rows, self.head, width=self.width) if self.head else \
            aligned(self.columns, self.rows, width=self.width)
        if self.caption is None:
            return body
        return "\n".join([*_wrap_lines(self.caption, self.width), body])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        wrap: bool | Collection[int] = self.width is not None and (self.wraps if self.wraps is not None else True)
        return html_table(self.columns, self.rows, self.caption, wrap=wrap)


def _wrap_lines(text: str, width: int | None) -> list[str]:
    """Each line of `text` wrapped to `width` characters (continuations indented two spaces)."""
    if width is None:
        return text.split("\n")
    return [part for line in text.split("\n") for part in
            (textwrap.wrap(line, width, subsequent_indent=" " * (len(line) - len(line.lstrip(" ")) + 2),
                           break_on_hyphens=False) or [""])]


def _fit(natural: list[int], room: int, words: list[int]) -> list[int]:
    """Column widths within `room`: the widest columns shrink to one cap (none below its longest
    word, up to 30, or 8 characters), the narrow ones keep theirs."""
    if sum(natural) <= room:
        return natural
    least = [min(w, max(8, min(word, 30))) for w, word in zip(natural, words)]
    if sum(least) > room:
        least = [min(w, 8) for w in natural]
    low, high = 1, max(natural)
    while low < high:  # the largest cap that fits
        cap = (low + high + 1) // 2
        if sum(min(w, max(cap, m)) for w, m in zip(natural, least)) <= room:
            low = cap
        else:
            high = cap - 1
    return [min(w, max(low, m)) for w, m in zip(natural, least)]


def aligned(columns: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "", width: int | None = None) -> str:
    """Columns and rows as plain text, each column padded to its widest cell; with `width`, lines
    stay within it: the widest columns wrap their cells onto more lines."""
    natural = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    if width is None or sum(natural) + 2 * (len(columns) - 1) + len(indent) <= width:
        widths = natural
    else:
        words = [max((len(word) for cell in [c, *(r[i] for r in rows)] for word in cell.split()), default=0)
                 for i, c in enumerate(columns)]
        widths = _fit(natural, width - len(indent) - 2 * (len(columns) - 1), words)

    def lines_of(cells: Sequence[str]) -> list[str]:
        parts = [textwrap.wrap(v, w, break_on_hyphens=False) if len(v) > w else [v] for v, w in zip(cells, widths)]
        out = []
        for k in range(max(len(p) for p in parts) if parts else 1):
            cells = ((p[k] if k < len(p) else "").ljust(w) for p, w in zip(parts, widths))
            out.append(indent + "  ".join(cells).rstrip())
        return out

    lines = lines_of(columns)
    for row in rows:
        lines += lines_of(row)
    return "\n".join(lines)


def records(columns: Sequence[str], rows: Sequence[Sequence[str]], head: int, indent: str = "",
            width: int | None = WIDTH) -> str:
    """`aligned`, or where that is wider than `width`: the first `head` columns aligned on one
    line per row, each other column under it as `column: value` (wrapped, indented)."""
    text = aligned(columns, rows, indent)
    if width is None or max(map(len, text.split("\n"))) <= width:
        return text
    first = aligned(columns[:head], [row[:head] for row in rows], indent, width).split("\n")
    out = [first[0]]
    pad = indent + "    "
    for row, line in zip(rows, first[1:]):
        out.append(line)
        for name, value in zip(columns[head:], row[head:]):
            out += textwrap.wrap(f"{name}: {value}", width, initial_indent=pad, subsequent_indent=pad + "  ",
                                 break_on_hyphens=False) or [pad]
    return "\n".join(out)


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
    wrap: bool | Collection[int] = False,
) -> str:
    """An HTML table of text cells, every string escaped and every cell left-aligned.

    `caption`: above the table; one of several lines (split at newlines) is left-aligned.
    `row_headers`: the first cell of each row is its header. `definitions`: (term, meaning)
    pairs listed in one full-width row above the column headers. `css_class`: the table's
    class. `highlight`: indexes of the rows to highlight. `wrap`: cells wrap between words (and
    after a dot in a dotted name), never inside one; a collection of column indexes: only those
    wrap, the others keep each cell on one line.
    """
    esc = html.escape
    sized = " style='max-width:100%'" if wrap else ""
    opening = f"<table{sized}>" if css_class is None else f"<table class='{esc(css_class)}'{sized}>"
    if caption is not None:
        lines = caption.split("\n")
        style = " style='text-align:left'" if len(lines) > 1 else ""
        opening += f"<caption{style}>{'<br>'.join(esc(line) for line in lines)}</caption>"
    head = ""
    terms = "".join(f"<li><b>{esc(term)}</b>: {esc(meaning)}</li>" for term, meaning in definitions)
    if terms:
        head += f"<tr><td colspan='{len(columns)}' style='text-align:left'><ul style='margin:0'>{terms}</ul></td></tr>"
    # between words only (and after a dot inside a name, `<wbr>`), never inside a word: a notebook's
    # narrow column otherwise splits `ExpBackward0` as `ExpBackw / ard0`; a word wider than the column
    # scrolls with the output instead
    wrapping = "text-align:left;white-space:normal;overflow-wrap:normal;word-break:normal"
    one_line = "text-align:left;white-space:nowrap" if wrap else "text-align:left"
    styles = [wrapping if wrap is True or (wrap and k in wrap) else one_line for k in range(len(columns))]
    header = " style='white-space:normal'" if wrap else ""
    head += "<tr>" + "".join(f"<th{header}>{esc(c)}</th>" for c in columns) + "</tr>"
    body = []
    for i, row in enumerate(rows):
        cells = [f"<td style='{style}'>{_breakable(esc(v)) if style == wrapping else esc(v)}</td>"
                 for v, style in zip(row, styles)]
        if row_headers and cells:
            cells[0] = f"<th style='text-align:left'>{esc(row[0])}</th>"
        style = f" style='background:{HIGHLIGHT}'" if i in highlight else ""
        body.append(f"<tr{style}>{''.join(cells)}</tr>")
    return f"{opening}<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


# where a name may break between its words: after a dot inside a dotted name (`MulBackward0.other`,
# `layers.attn`, never inside a number); and inside a long one (over 16 characters) also after an
# underscore between words (`max_pool2d_with_indices`), after an opening parenthesis and at a camel-case
# boundary (`MaxPool2D|With|Indices|Backward0`)
_NAME_DOT = re.compile(r"(?<=[A-Za-z0-9_\])])\.(?=[A-Za-z_])")
_LONG = re.compile(r"[^\s<>]{17,}")
_WORD_BREAK = re.compile(r"(?<=[A-Za-z0-9])_(?=[A-Za-z0-9])|(?<=\w\()(?=\w)")
_CAMEL = re.compile(r"(?<=[A-Za-z0-9])(?=[A-Z][a-z])")


def _breakable(text: str) -> str:
    """Escaped text with line-break opportunities (`<wbr>`) between the words of a name; never inside
    a word or a number (1.5)."""
    def split(long: re.Match) -> str:
        return _CAMEL.sub("<wbr>", _WORD_BREAK.sub(lambda m: m.group(0) + "<wbr>", long.group(0)))

    return _LONG.sub(split, _NAME_DOT.sub(".<wbr>", text))


def graph_only_bytes(trace: TraceData) -> dict[Storage, int]:
    """Bytes of each storage that only the graph keeps (what dropping it gives back); 0 for a
    parameter's, an input's, the output's or a named variable's, which live anyway."""
    owned = set(trace.graph_owned_storages())
    return {s: s.nbytes if s in owned else 0 for s in trace.storages}


def residual_table(trace: TraceData, sort: str = "forward", top: int | None = None) -> Table:
    """Every residual with its bytes, role, rule and free point. `sort`: `forward` (forward
    order), `bytes` (most bytes only the graph keeps first: the activations' cost) or `pinned`
    (most bytes of the allocation pinned first); `top`: only the first that many rows."""
    if sort not in SORTS:
        raise TableArgumentError(f"sort={sort!r}: use one of {', '.join(repr(k) for k in SORTS)}.")
    if top is not None and (not isinstance(top, int) or top < 1):
        raise TableArgumentError(f"top={top!r}: pass a positive number of rows, or None for all.")
    residuals = trace.residuals
    only = graph_only_bytes(trace)
    if sort != "forward":
        def key(r: Residual) -> tuple[int, int]:
            pinned = r.pinned_nbytes or 0
            return (-(only.get(r.storage, 0) if r.storage is not None else 0), -pinned) if sort == "bytes" \
                else (-pinned, 0)
        residuals = sorted(residuals, key=key)
    shown = residuals[:top] if top is not None else residuals
    caption = None
    if sort != "forward" or len(shown) < len(residuals):
        order = {"forward": "in forward order", "pinned": "by bytes pinned",
                 "bytes": "by bytes only the graph keeps (a parameter's or input's live anyway)"}[sort]
        caption = f"{len(shown)} of {len(residuals)} residuals, {order}"
    lifetimes = trace.lifetimes().residuals
    rows = [residual_row(r, lifetimes[r.index]) for r in shown]
    return Table(COLUMNS, rows, caption, WIDTH, HEAD, (0, 6, 7, 8))


def _rows(trace: TraceData) -> list[tuple[str, ...]]:
    lifetimes = trace.lifetimes().residuals
    return [residual_row(r, lifetimes[r.index]) for r in trace.residuals]


MODULE_COLUMNS = ("module", "ops", "residuals", "graph-only", "also pins", "freed after step")
NO_MODULE = "(outside modules)"  # the group of nodes no module's forward made


def module_table(trace: TraceData, lifetimes: Lifetimes | None = None) -> Table:
    """Per module of the captured model (the innermost module whose forward made each op): its
    ops, the residuals their rules saved, the bytes only the graph keeps for them (distinct
    storages), what else they pin (parameters, inputs: live anyway) and the steps that free the
    graph-only bytes (from `lifetimes`, default trace.lifetimes(): observed, else predicted)."""
    only = graph_only_bytes(trace)
    lifetimes = lifetimes if lifetimes is not None else trace.lifetimes()
    groups: dict[str, list] = {}
    for node in trace.nodes:
        groups.setdefault(node.module or NO_MODULE, []).append(node)
    rows = []
    for module, nodes in groups.items():
        residuals = [r for n in nodes for r in n.residuals]
        storages = list(dict.fromkeys(r.storage for r in residuals if r.storage is not None))
        graph = sum(only[s] for s in storages)
        other = sum(s.nbytes for s in storages if not only[s])
        steps = sorted({step for s in storages if only[s] for step in [_freed_step(s, lifetimes)]
                        if step is not None})
        kept = [s for s in storages if only[s] and _freed_step(s, lifetimes) is None]
        when = "-" if not steps else str(steps[0]) if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"
        if kept:
            when += f" ({len(kept)} not freed)" if steps else f"not freed ({len(kept)})"
        rows.append((graph, module, str(len(nodes)), str(len(residuals)), format_bytes(graph),
                     format_bytes(other), when))
    rows.sort(key=lambda row: -row[0])
    source = "predicted: backward not run yet" if lifetimes.predicted else "observed"
    caption = (f"residuals by module ({len(rows)} modules), most graph-only bytes first; "
               f"freed after step: {source}")
    if not trace.captured:
        caption += "; traced without tk.capture(): no modules known"
    return Table(MODULE_COLUMNS, [row[1:] for row in rows], caption, WIDTH, wraps=(0, 5))


def _freed_step(storage: Storage, lifetimes: Lifetimes) -> int | None:
    """The step after which the storage's memory was gone (its residuals share one lifetime of memory)."""
    found = storage.residuals
    return lifetimes.residuals[found[0].index].freed_at if found else None


def _inputs(inputs: tuple[int | str, ...]) -> str:
    return ", ".join(f"#{i}" if type(i) is int else i for i in inputs)


def trace_text(trace: TraceData) -> str:
    """The whole trace in plain text: forward ops, residuals, observed reverse steps."""
    out = _wrap_lines(f"trace: {trace.summary()}", WIDTH)
    out.append("forward (execution order)")
    fwd = [
        (f"#{n.index}", n.op, n.name, n.source or "-", _inputs(n.inputs))
        for n in trace.nodes
    ]
    out.append(aligned(("node", "op", "backward", "source", "inputs"), fwd, "  ", WIDTH))
    notes: dict[str, list[str]] = {}
    for n in trace.nodes:
        if n.note:
            notes.setdefault(n.note, []).append(f"#{n.index}")
    if notes:
        out.append("notes")
        out += [line for note, where in notes.items() for line in _wrap_lines(f"  {', '.join(where)}: {note}", WIDTH)]
    out.append("residuals")
    if trace.residuals:
        out.append(records(COLUMNS, _rows(trace), HEAD, "  ", WIDTH))
    else:
        out.append("  (none: no rule saved anything)")
    if trace.steps or trace.error:
        kept = trace.retained_words()
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
        out.append(aligned(("step", "rule", "used", "released", "freed"), rows, "  ", WIDTH))
        if trace.error:
            out += _wrap_lines(f"  backward raised: {trace.error}", WIDTH)
    else:
        out.append(f"reverse: not observable ({trace.without_data} tensors): call .predict_backward()"
                   if trace.without_data else "reverse: not run yet (call .backward() to observe it)")
    return "\n".join(line for part in out for line in (part.split("\n") if len(part) <= WIDTH else
                                                         _wrap_lines(part, WIDTH)))
