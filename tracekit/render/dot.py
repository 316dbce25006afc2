"""The trace drawing: mirrored lanes. Forward ops run left to right; each reverse rule sits
directly above the op it reverses, so the reverse lane runs right to left; leaves enter where
they are used; each residual is a short edge from the value that was saved to the rule that
reads it; a lifetime strip under the drawing shows when each residual is released and freed.

Long traces fold top to bottom (forward lane down the left, reverse lane up the right, leaves
on their own rows), collapse runs of view/reshape ops that save nothing, and collapse repeated
blocks, so the drawing fits its place (840 px by default: a JupyterLab cell at a 1280 px window)
at full size: text is never scaled down. Each residual edge carries the bytes it pins; the
heaviest are drawn thicker."""

from __future__ import annotations

import functools
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from itertools import compress, filterfalse
from operator import itemgetter, not_
from typing import Any

import graphviz
import numpy as np

from .. import rules
from ..keeper import gc_paused
from ..lifetimes import GONE, RECOMPUTED, Lifetimes
from ..reader import Node, Residual, TraceData
from ..rows import HeldIn, Role
from ..storage import format_bytes

FORWARD, REVERSE, RESIDUAL = "#555555", "#1f5fbf", "#d9731a"
COLLAPSED = "collapsed"
WIDTH = 840  # px: a JupyterLab cell at a 1280 px window (848 px), a README column
RULE_CHARS, RULE_LINES = 40, 3  # a rule's text in a box: wrapped at 40 characters, at most 3 lines
LANE_RULE_CHARS = 40  # lanes: each rule sits over its op, so narrower boxes
LEAVES_PER_ROW = 4  # folded: a row of leaves above their op holds at most this many
HEAVY = 3  # residual edges drawn heavy: the ones pinning the most bytes
VIEW_RUN_FROM = 24  # traces with more nodes than this collapse runs of view ops that save nothing
VIEWS = frozenset({"ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "TransposeBackward0",
                   "TBackward0", "PermuteBackward0", "ExpandBackward0", "UnsqueezeBackward0", "SqueezeBackward0",
                   "SqueezeBackward1", "SqueezeBackward2", "SelectBackward0", "SliceBackward0", "AsStridedBackward0",
                   "AliasBackward0", "CloneBackward0", "SplitBackward0", "SplitWithSizesBackward0",
                   "UnbindBackward0"})

# role -> (shape, fill, border) of a leaf or output node; ops are white rounded boxes
ROLE_STYLE: dict[Role, tuple[str, str, str]] = {
    Role.INPUT: ("ellipse", "#e3f4e1", "#2e7d32"),
    Role.PARAMETER: ("box", "#ece3f7", "#6a3d9a"),
    Role.CONSTANT: ("note", "#eeeeee", "#777777"),
    Role.OUTPUT: ("doublecircle", "#fde0dd", "#c62828"),
    Role.INTERMEDIATE: ("box", "#ffffff", FORWARD),
}
# who keeps a residual's memory -> bar colour in the lifetime strip
HOLDER_COLOUR = {
    "graph": RESIDUAL, Role.INPUT: "#2e7d32", Role.PARAMETER: "#6a3d9a", Role.OUTPUT: "#c62828",
    "variable": "#777777",
}
PALE = {
    RESIDUAL: "#f6d2b2", "#2e7d32": "#c6e6c3", "#6a3d9a": "#dccdee", "#c62828": "#f6c4c0", "#777777": "#dddddd",
}
STRIP_MAX_SLOTS, STRIP_MAX_ROWS = 32, 12
STRIP_WORDS = 44  # characters per line of a lifetime's words in the strip (longer ones wrap, the strip stays narrow)
_CHAR_PT = 5.6  # average Helvetica glyph width at 10 pt, for the width estimate


@functools.lru_cache(maxsize=8192)
def _q(text: str) -> str:
    """A DOT double-quoted string; newlines become DOT's centred line breaks."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(**kw: str) -> str:
    return "[" + " ".join(f"{k}={_q(v)}" for k, v in kw.items()) + "]"


def _repeats(ops: list[str], max_period: int = 400) -> tuple[int, int, int] | None:
    """(start, period, count) of the longest stretch of a block of ops repeated back to back
    (a stack of identical layers), if it covers most of the trace."""
    n = len(ops)
    names = {op: i for i, op in enumerate(dict.fromkeys(ops))}
    if len(names) < 2:
        return None
    codes = np.fromiter(map(names.__getitem__, ops), dtype=np.int32, count=n)
    change = np.flatnonzero(np.diff(codes)) + 1
    runs = np.diff(np.concatenate(([0], change, [n])))
    if runs.max() > 0.75 * n:
        # one op repeated over 3/4 of the trace: a varied block covering 60 % would overlap that run
        # by more than n/3 >= its period, so one whole period would be that single op
        return None
    for period in range(2, min(max_period, n // 3) + 1):
        same = np.concatenate(([0], (codes[:-period] == codes[period:]).astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(same))  # run starts and ends, alternating
        if edges.size == 0:
            continue
        lengths = edges[1::2] - edges[::2]
        best = int(lengths.argmax())
        best_len, best_start = int(lengths[best]), int(edges[2 * best])
        count = best_len // period + 1
        varied = len(set(ops[best_start:best_start + period])) >= 2  # a layer, not a run of one op
        if count >= 3 and varied and count * period >= 0.6 * n:
            return best_start, period, count
    return None


def _shown(trace: TraceData, max_nodes: int) -> tuple[set[int], _NodesAt, str]:
    """Which node indexes are drawn, which collapse into one box, and a sentence saying so.
    Repeated blocks (identical layers) keep their first copy; otherwise the middle of a long
    trace collapses."""
    names = trace.record.node_columns.name
    n = len(names)
    if n <= max_nodes:
        return set(range(n)), _NodesAt(trace, []), ""
    found = _repeats(list(names))
    if found is not None:
        start, period, count = found
        first_end, repeats_end = start + period, start + count * period
        keep = set(range(first_end)) | set(range(repeats_end, n))
        if len(keep) <= 2 * max_nodes:
            hidden = _nodes_outside(trace, keep)
            return keep, hidden, (f"{count} repeated blocks of {period} nodes: showing the first, "
                                  f"{count - 1} blocks ({len(hidden)} nodes) collapsed")
    head = max_nodes // 2
    keep = set(range(head)) | set(range(n - (max_nodes - head), n))
    hidden = _nodes_outside(trace, keep)
    ops_of = trace.record.node_columns.op
    ops = ", ".join(f"{op} ×{k}" for op, k in Counter(map(ops_of.__getitem__, hidden.indexes)).most_common(4))
    return keep, hidden, f"showing {len(keep)} of {n} nodes; {len(hidden)} collapsed ({ops}, ...)"


class _NodesAt(Sequence[Node]):
    """The nodes at `indexes`, each made when read (a collapsed middle may be most of 100k nodes)."""

    def __init__(self, trace: TraceData, indexes: list[int]) -> None:
        self.trace, self.indexes = trace, indexes

    def __len__(self) -> int:
        return len(self.indexes)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [Node(self.trace._data, i) for i in self.indexes[k]]
        return Node(self.trace._data, self.indexes[k])


def _nodes_outside(trace: TraceData, keep: set[int]) -> _NodesAt:
    """The nodes not in `keep`, in forward order."""
    return _NodesAt(trace, list(filterfalse(keep.__contains__, range(trace.record.n_nodes))))


def _drawn(n: int, keep: set[int], groups: dict[int, str]) -> list[int | str]:
    """What is drawn, in forward order: each kept node's index, and each box's name where its first node
    is (`groups`: a hidden node -> its view-run box; the other hidden nodes: the collapsed box), found
    without a pass over every node."""
    first: dict[str, int] = {}
    for i, box in groups.items():
        if i not in keep and (box not in first or i < first[box]):
            first[box] = i
    if n - len(keep) > sum(1 for i in groups if i not in keep):  # hidden nodes in no view-run box
        first[COLLAPSED] = next(i for i in range(n) if i not in keep and i not in groups)
    at = sorted([(i, i) for i in keep] + [(i, box) for box, i in first.items()], key=itemgetter(0))
    return [what for _, what in at]


def _view_runs(trace: TraceData, keep: set[int], outputs: set[int]) -> dict[int, str]:
    """Runs of two or more consecutive view/reshape ops that save nothing (not an output): node
    index -> the id of the box the run is drawn as."""
    groups: dict[int, str] = {}
    run: list[int] = []

    def close() -> None:
        if len(run) >= 2:
            groups.update({i: f"v{run[0]}" for i in run})
        run.clear()

    c = trace.record.node_columns
    counts = c.count
    # the view ops found in one C-level pass over the names (a chain of 100k multiplications has none)
    for i in compress(range(len(c.name)), map(VIEWS.__contains__, c.name)):
        if run and run[-1] != i - 1:  # the node before it is not in the run: the run ends there
            close()
        if i in keep and not counts[i] and i not in outputs:
            run.append(i)
        else:
            close()
    close()
    return groups


def _measured_width(source: str) -> float:
    """The drawing's width in px as Graphviz lays it out (inf if it cannot render here)."""
    import re

    from ..errors import RenderError
    from .svg import render

    try:
        found = re.search(r'<svg width="([\d.]+)pt"', render(source, "svg"))
    except RenderError:
        return float("inf")
    return float(found.group(1)) * 4 / 3 if found else float("inf")


def _holder(r: Residual) -> str | Role:
    """Who keeps a residual's memory once autograd lets go: a leaf, the output, a variable, or nobody."""
    s = r.storage
    if s is None:
        return "graph"
    if s.is_parameter:
        return s.leaf_role or Role.PARAMETER
    if s.is_output:
        return Role.OUTPUT
    if s.names:
        return "variable"
    return "graph"


def _outputs(trace: TraceData) -> list[tuple[int, str]]:
    """(forward node index, name) of each traced output."""
    outputs = trace.record.outputs
    out = []
    for k, (i, name) in enumerate(outputs):
        if i is None:
            continue
        out.append((i, name or ("output" if len(outputs) == 1 else f"output {k}")))
    return out


@functools.lru_cache(maxsize=4096)
def _leaf_id(label: str) -> str:
    return "leaf_" + "".join(c if c.isalnum() else f"_{ord(c):x}" for c in label)


class _Plan:
    """Where each thing goes: ids, columns, leaves between the lanes or on the left."""

    def __init__(self, trace: TraceData, keep: set[int], hidden: _NodesAt,
                 groups: dict[int, str] | None = None) -> None:
        self.trace, self.keep, self.hidden = trace, keep, hidden
        self.group = groups or {}  # hidden node index -> the box it is drawn in (default: the one collapsed box)
        self.leaf_role = dict(trace.leaf_roles)
        # leaves: label -> consumer node index (its first forward consumer that is drawn)
        self.leaf_at: dict[str, int] = {}
        kept = [Node(trace._data, i) for i in sorted(keep)]
        for node in kept:
            for src in node.input_leaves:
                self.leaf_at.setdefault(src, node.index)
        # constants and other leaves known only as residual producers
        self.extra: dict[str, tuple[int, Role, str]] = {}  # id -> (column node, role, label)
        for node in kept:
            for r in node.residuals:
                leaf = r.leaf_source
                if leaf is not None and leaf not in self.leaf_at:
                    key = _extra_key(r)
                    if key not in self.extra:
                        self.extra[key] = (node.index, r.kind, leaf)
        # a source op (no drawn forward input) takes one leaf on its left: the input, not a parameter
        self.left: set[str] = set()
        for node in kept:
            if node.input_nodes:
                continue
            mine = [s for s in node.input_leaves if self.leaf_at.get(s) == node.index]
            if mine:
                order = sorted(range(len(mine)), key=lambda k: (self.leaf_role.get(mine[k]) == Role.PARAMETER, -k))
                self.left.add(mine[order[0]])

    def fid(self, i: int) -> str:
        return f"f{i}" if i in self.keep else f"f_{self.group.get(i, COLLAPSED)}"

    def lid(self, label: str) -> str:
        return _leaf_id(label)

    def rid(self, i: int) -> str:
        return f"r{i}" if i in self.keep else f"r_{self.group.get(i, COLLAPSED)}"

    def residual_source(self, r: Residual) -> str | None:
        """The drawn id of where a residual came from (None: nowhere to draw it from)."""
        if r.from_node is not None:
            return self.fid(r.from_node)
        leaf = r.leaf_source
        if leaf is None:
            return None
        return self.lid(leaf if leaf in self.leaf_at else _extra_key(r))


def _rule_label(trace: TraceData, node: Node, step_of: dict[int, int], chars: int = RULE_CHARS) -> str:
    step = f"step {step_of[node.index]} · " if node.index in step_of else ""
    rules = _node_rules(node) or ["reads no residual"]
    lines = []
    for rule in rules:
        lines += _wrapped_rule(rule, chars)
    return "\n".join([f"{step}{node.name}", *lines])


@functools.lru_cache(maxsize=4096)
def _wrapped_rule(rule: str, chars: int) -> tuple[str, ...]:
    """A rule's formula as label lines of at most `chars` (a graph repeats few formulas many times)."""
    parts = textwrap.wrap(rule, chars, subsequent_indent="    ", break_on_hyphens=False,
                          break_long_words=False) or [rule]
    if len(parts) > RULE_LINES:  # PyTorch's long formulas: the table has the whole text
        parts = [*parts[:RULE_LINES - 1], parts[RULE_LINES - 1].rstrip(",") + " …"]
    return tuple(parts)


def _node_rules(node: Node) -> list[str]:
    """The rule's formulas, one line per gradient it computes (a formula PyTorch gives several
    inputs at once, once); the residuals' own rule texts for a node without a rule."""
    if not node.residuals:
        return []
    formulas = _formulas(node.name, node.needs) if node.described else None
    return sorted({r.rule for r in node.residuals}) if formulas is None else list(formulas)


@functools.lru_cache(maxsize=4096)
def _formulas(name: str, needs: tuple[bool, ...]) -> tuple[str, ...] | None:
    """`grad_x = ...` per formula of a described node type for the inputs that get a gradient
    (None: the rule table has no entry for this many inputs)."""
    table = rules.input_rules(name, len(needs))
    if table is None:
        return None
    wanted = [(slot, f) for k, (slot, f) in enumerate(table) if k >= len(needs) or needs[k]] or table
    by_formula: dict[str, list[str]] = {}
    for slot, formula in wanted:
        by_formula.setdefault(formula, []).append(slot)
    return tuple(rules.assignment([f"grad_{n}" for n in slots], f) for f, slots in by_formula.items())


def _estimate_lr_width_pt(trace: TraceData, plan: _Plan, step_of: dict[int, int]) -> float:
    """Rough width of the left-to-right layout, in points (Graphviz does the real layout)."""
    total = 0.0
    columns = sorted(plan.keep)
    for i in columns:
        node = Node(trace._data, i)
        texts = [_rule_label(trace, node, step_of, LANE_RULE_CHARS), f"#{i} {node.op}\n{node.source or ''}"]
        widest = max(len(line) for t in texts for line in t.split("\n"))
        total += widest * _CHAR_PT + 16 + 24
    total += sum(60 for leaf in plan.left) + 60  # leaves on the left, the output on the right
    if plan.hidden:
        total += 140
    return total


def _lifetime_strip(trace: TraceData, plan: _Plan) -> str:
    """HTML rows: one bar per residual from the op that saved it to the step that released it
    (solid), then pale while something else still holds its memory."""
    nodes = [Node(trace._data, i) for i in sorted(plan.keep)]
    residuals = [r for node in nodes for r in node.residuals]
    n = trace.record.n_nodes
    lifetimes = None if plan.hidden or not residuals or len(residuals) > STRIP_MAX_ROWS else trace.lifetimes()
    m = len(lifetimes.order) if lifetimes is not None else 0
    if lifetimes is None or n + m > STRIP_MAX_SLOTS:
        why = "no residuals" if not residuals else "too many to draw"
        return (f'<tr><td align="left" colspan="3"><font point-size="9">lifetimes: {why} here; '
                'tr.timeline() plots the bytes alive per step; tr.table() lists every free point</font></td></tr>')
    total = n + m
    # the drawing's title says backward has not run; the strip's stays short
    title = "lifetimes (predicted)" if lifetimes.predicted else "lifetimes (observed)"
    head = [f'<td align="left"><font point-size="9"><b>{title}</b></font></td>',
            f'<td colspan="{n}"><font point-size="8">forward op</font></td>',
            '<td></td>',
            f'<td colspan="{m}"><font point-size="8">backward step</font></td>', '<td></td>']
    cell = 22 if total <= 12 else 13  # many slots: narrower bars, so the strip does not set the width
    size = 8 if total <= 12 else 6
    ticks = ['<td></td>'] + [f'<td width="{cell}"><font point-size="{size}">{"#" if total <= 12 else ""}{node.index}'
                             '</font></td>' for node in trace.nodes]
    ticks += ['<td width="3"></td>'] + [f'<td width="{cell}"><font point-size="{size}">{k}</font></td>'
                                        for k in range(m)]
    ticks += ['<td></td>']
    rows = ["<tr>" + "".join(head) + "</tr>", "<tr>" + "".join(ticks) + "</tr>"]
    for r in residuals:
        colour = HOLDER_COLOUR[_holder(r)]
        start = r.node.index
        end, gone = _bar(lifetimes, r.index, n, total)
        cells = []
        for slot in range(total):
            if slot == n:
                cells.append('<td bgcolor="#bbbbbb"></td>')
            if end is not None and start <= slot <= end:
                cells.append(f'<td bgcolor="{colour}"></td>')
            elif end is not None and gone is not None and end < slot <= gone:
                cells.append(f'<td bgcolor="{PALE[colour]}"></td>')
            else:
                cells.append("<td></td>")
        lines = textwrap.wrap(_free_words(lifetimes, r), STRIP_WORDS)
        words = '<br align="left"/>'.join(escape(part) for part in lines)
        rows.append(f'<tr><td align="left"><font point-size="9">{escape(_residual_name(r))}</font></td>'
                    f'{"".join(cells)}<td width="4"></td>'
                    f'<td align="left" balign="left"><font point-size="9"> {words}</font></td></tr>')
    return "".join(rows)


def _bar(lifetimes: Lifetimes, i: int, n: int, total: int) -> tuple[int | None, int | None]:
    """The strip slots where residual i's solid bar ends (its release) and its pale bar ends (its
    memory gone), read from its lifetime; (None, None) when it has no bar (recomputed, gone)."""
    lt = lifetimes.residuals[i]
    if lt.note in (RECOMPUTED, GONE):
        return None, None
    end = n + lt.released_at if lt.released_at is not None else total - 1
    gone = n + lt.freed_at if lt.freed_at is not None else (total - 1 if lt.held_by else end)
    return end, gone


def _free_words(lifetimes: Lifetimes, r: Residual) -> str:
    """A residual's lifetime in words, with where it is kept when not in the graph."""
    where = "" if r.place is HeldIn.GRAPH else f" [{r.held_in}]"
    return lifetimes.residuals[r.index].words() + where


_NO_STRIP = "lifetimes: tr.timeline() plots the bytes alive per step; tr.table() lists every free point"


def _no_strip() -> str:
    first, _, second = _NO_STRIP.partition("; ")
    return (f'<tr><td align="left" colspan="3"><font point-size="9">{first};</font></td></tr>'
            f'<tr><td align="left" colspan="3"><font point-size="9">{second}</font></td></tr>')


def _strip_fits(trace: TraceData, plan: _Plan, width: int) -> bool:
    """Whether the lifetime strip fits `width` at full size (else the drawing points to tr.timeline())."""
    residuals = [r for i in sorted(plan.keep) for r in Node(trace._data, i).residuals]
    if not residuals:
        return True
    n = trace.record.n_nodes  # a slot per forward op at least: past 12 slots each is 13 px + 3
    if n > 12 and n * (13 + 3) + 40 > width:
        return False  # too wide whatever the lifetimes say: none is predicted to find that out
    lifetimes = trace.lifetimes()
    slots = trace.record.n_nodes + len(lifetimes.order)
    cell = 22 if slots <= 12 else 13
    name = max(len(_residual_name(r)) for r in residuals)
    free = max(len(_free_words(lifetimes, r)) for r in residuals)
    return (max(name, 22) + free) * 9 * 0.5 * 4 / 3 + slots * (cell + 3) + 40 <= width


GLYPH = {Role.INPUT: "●", Role.PARAMETER: "■", Role.CONSTANT: "▮", Role.OUTPUT: "◉"}


def _legend(roles: set[Role], width: int = WIDTH) -> str:
    """Two lines (more in a narrow place): what the edge colours mean, and the role of each kind
    of leaf drawn."""
    row = '</td></tr><tr><td align="left" colspan="3">'
    parts = [f'<font point-size="9" color="{FORWARD}">━ forward op (left to right)</font>',
             f'<font point-size="9" color="{REVERSE}">━ reverse rule (runs right to left)</font>',
             f'<font point-size="9" color="{RESIDUAL}">╍ residual: saved value → the rule that reads it, '
             + (f'</font>{row}<font point-size="9" color="{RESIDUAL}">   ' if width < 700 else "")
             + 'with the bytes it pins (thick: the heaviest)</font>']
    edges = "   ".join(parts[:2]) + (row if width < 1100 else "   ") + parts[2]
    kinds = "   ".join(f'<font point-size="9" color="{ROLE_STYLE[r][2]}">{GLYPH[r]} {r.value}</font>'
                       for r in GLYPH if r in roles)
    kinds += f'   <font point-size="9" color="{FORWARD}">▢ forward op, its output an intermediate</font>'
    return (f'<tr><td align="left" colspan="3">{edges}</td></tr>'
            f'<tr><td align="left" colspan="3">{kinds}</td></tr>')


def _node_line(node_id: str, **attrs: str) -> str:
    return f"{node_id} {_attrs(**attrs)}"


def _plain_lifetimes(trace: TraceData, plan: _Plan) -> list[str]:
    """The lifetime strip in words, for renderers without HTML labels (the WebAssembly build)."""
    residuals = [r for i in sorted(plan.keep) for r in Node(trace._data, i).residuals]
    if plan.hidden or not residuals or len(residuals) > STRIP_MAX_ROWS:
        return ["lifetimes: tr.table() lists every free point"]
    lifetimes = trace.lifetimes()
    lines = ["lifetimes (predicted: backward not run yet):" if lifetimes.predicted else "lifetimes (observed):"]
    for r in residuals:
        lines.append(f"  {_residual_name(r)}: saved at #{r.node.index}, {_free_words(lifetimes, r)}")
    return lines


def _extra_key(r: Residual) -> str:
    """The drawn id of a leaf known only as a residual's maker: its name, or (unnamed) one per use."""
    return r.from_name if r.from_name is not None else f"{r.leaf_source}@{r.node.index}.{r.slot}"


def _residual_name(r: Residual) -> str:
    producer = r.leaf_source or (f"#{r.from_node}" if r.from_node is not None else "?")
    if r.from_node is not None and r.storage is not None and r.storage.names:
        producer = r.storage.names[0]  # the caller's name for the value, e.g. y
    pinned = format_bytes(r.pinned_nbytes) if r.storage is not None else "0 B"
    pins = "" if pinned == format_bytes(r.nbytes) else f" (pins {pinned})"
    return f"{producer} → #{r.node.index} {r.node.name}.{r.slot} · {format_bytes(r.nbytes)}{pins}"


def trace_graph(trace: TraceData, max_nodes: int = 60, width: int = WIDTH, html: bool | None = None,
                fold: bool | None = None) -> graphviz.Digraph:
    """Build the graphviz drawing of a trace (see _trace_graph), with the cycle collector paused:
    the drawing makes many short-lived objects, and each collection would rescan a big trace."""
    with gc_paused():
        return _trace_graph(trace, max_nodes, width, html, fold)


@dataclass
class _Layout:
    """The layout decisions, made before any DOT text: which nodes are drawn (and which collapse into
    which box), the lanes or the folded layout, the observed step of each node's rule."""

    plan: _Plan
    keep: set[int]
    hidden: _NodesAt  # the nodes not drawn one by one
    groups: dict[int, str]  # node index -> the view-run box it is drawn in
    collapsed: str  # the sentence saying what collapsed
    step_of: dict[int, int]
    lanes: bool


def _layout(trace: TraceData, max_nodes: int, width: int, fold: bool | None) -> _Layout | None:
    """Stage 1: what to draw and how to lay it out for `width` px; None when only laying out both ways
    and measuring can tell (a lanes drawing near the width)."""
    n = trace.record.n_nodes
    groups = _view_runs(trace, set(range(n)), {i for i, _ in _outputs(trace)}) if n > VIEW_RUN_FROM else {}
    if groups and n - len(groups) + len(set(groups.values())) <= max_nodes:
        keep = set(range(n)) - set(groups)
        hidden = _nodes_outside(trace, keep)
        collapsed = (f"{len(hidden)} view/reshape ops that save nothing drawn as {len(set(groups.values()))} "
                     "boxes (tr.text() lists each)")
    else:
        groups = {}
        keep, hidden, collapsed = _shown(trace, max_nodes)
    plan = _Plan(trace, keep, hidden, groups)
    step_of = {s.node.index: s.index for s in trace.steps}
    estimate = _estimate_lr_width_pt(trace, plan, step_of) * 4 / 3
    if fold is None and 0.8 * width < estimate <= 1.5 * width and len(plan.keep) <= 30:
        return None
    lanes = estimate <= width if fold is None else not fold
    return _Layout(plan, keep, hidden, groups, collapsed, step_of, lanes)


class _Dot:
    """Stage 2: the DOT text of the nodes and edges, from the layout (lines in `out`; the leaf roles
    drawn, for the legend; the long gradient edges a folded drawing leaves out)."""

    def __init__(self, trace: TraceData, layout: _Layout) -> None:
        self.trace, self.layout, self.plan = trace, layout, layout.plan
        self.keep, self.lanes = layout.keep, layout.lanes
        self.drawn = _drawn(trace.record.n_nodes, layout.keep, layout.groups)  # node indexes and boxes, in order
        self.out: list[str] = []
        self.roles_seen: set[Role] = set()
        self.aligned: set[int] = set()  # columns already held straight by a visible edge
        self.rule_ids: list[str] = []
        self.op_ids: list[str] = []
        self.middle_ids: list[str] = []
        self.rows: dict[str, list[str]] = {}  # ids that share a rank (folded: a node's row, its leaves' above)
        self.column_of: dict[str, str] = {}  # a leaf drawn between the lanes -> the column (node) it enters
        self.between_done: set[str] = set()
        self.long_gradients = 0

    def lines(self) -> list[str]:
        """Every node, edge and rank line, in drawing order."""
        self.nodes()
        self.leaves()
        self.outputs()
        self.forward_edges()
        self.residual_edges()
        self.straighten()
        self.ranks()
        return self.out

    def ordered(self, first: str, second: str, visual_from_first: bool, **attrs: str) -> None:
        """An edge whose tail comes first (lanes: higher row; folded: further left)."""
        if not visual_from_first:
            attrs["dir"] = "back"
        self.out.append(f"{first} -> {second} {_attrs(**attrs)}")

    def column(self, i: int, leaf_id: str | None, to_rule: dict[str, str] | None,
               to_op: dict[str, str] | None) -> None:
        """Edges inside column i: the rule, a leaf between the lanes, the op.
        Lanes: rule row above the leaf row above the op row. Folded: op, leaf, rule left to right."""
        rid, fid = self.plan.rid(i), self.plan.fid(i)
        if leaf_id is None:  # the op's own value read by its rule
            if to_rule is not None:
                if self.lanes:
                    self.ordered(rid, fid, False, weight="20", **to_rule)
                else:
                    self.ordered(fid, rid, True, **to_rule)
                self.aligned.add(i)
            return
        if self.lanes:
            if to_rule is not None:
                self.ordered(rid, leaf_id, False, weight="20", **to_rule)
            if to_op is not None:
                self.ordered(leaf_id, fid, True, weight="20", **to_op)
            self.aligned.add(i)
        else:  # folded: the leaf sits on its own row above the op and the rule
            if to_op is not None:
                self.ordered(leaf_id, fid, True, **to_op)
            if to_rule is not None:
                self.ordered(leaf_id, rid, True, **to_rule)

    def box(self, box: str, inside: list[int]) -> None:
        """A collapsed box: the rules and the ops of a run of view ops (`inside`: their indexes), or of
        the collapsed middle."""
        add, lanes, hidden = self.out.append, self.lanes, self.layout.hidden
        if box == COLLAPSED:
            rule_text, op_text = f"… {len(hidden)} rules collapsed …", f"… {len(hidden)} nodes collapsed …"
        else:
            ops_of = self.trace.record.node_columns.op
            ops = ", ".join(f"{op} ×{k}" if k > 1 else op for op, k in Counter(map(ops_of.__getitem__, inside)).items())
            span = f"#{inside[0]}–#{inside[-1]}"
            rule_text = f"{len(inside)} view rules ({span})\nreshape the gradient, read no residual"
            op_text = "\n".join([f"{span}: {len(inside)} view ops", *textwrap.wrap(ops, 32)])
        add(_node_line(f"r_{box}", label=rule_text, style="dashed,rounded", color=REVERSE,
                       **({} if lanes else {"group": "reverse"})))
        add(_node_line(f"f_{box}", label=op_text, style="dashed,rounded",
                       **({} if lanes else {"group": "forward"})))
        add(f"r_{box} -> f_{box} [style=invis weight=20]" if lanes else f"f_{box} -> r_{box} [style=invis]")
        self.rule_ids.append(f"r_{box}")
        self.op_ids.append(f"f_{box}")
        self.rows[box] = [f"f_{box}", f"r_{box}"]

    def nodes(self) -> None:
        """The reverse rules and the forward ops (or the boxes they collapse into)."""
        trace, keep, lanes, add = self.trace, self.keep, self.lanes, self.out.append
        groups, step_of = self.layout.groups, self.layout.step_of
        members: dict[str, list[int]] = {}  # each view-run box's nodes (the collapsed box: only counted)
        for i, box in groups.items():
            if i not in keep:
                members.setdefault(box, []).append(i)
        d = trace._data
        for i in self.drawn:
            if type(i) is str:  # a box, where its first node is
                self.box(i, sorted(members.get(i, ())))
                continue
            node = Node(d, i)
            ran = {} if i in step_of or not trace.steps else {"fontcolor": "#999999"}
            lane = {} if lanes else {"group": "reverse"}  # folded: each lane a straight column
            label = _rule_label(trace, node, step_of, LANE_RULE_CHARS if lanes else RULE_CHARS)
            add(_node_line(f"r{i}", label=label, color=REVERSE, **ran, **lane))
            where = f"\n{node.source}" if node.source else ""
            add(_node_line(f"f{i}", label=f"#{i} {node.op}{where}", color=FORWARD,
                           **({} if lanes else {"group": "forward"})))
            self.rule_ids.append(f"r{i}")
            self.op_ids.append(f"f{i}")
            self.rows[str(i)] = [f"f{i}", f"r{i}"]

    def leaf_node(self, node_id: str, label: str, role: Role) -> None:
        """A leaf or output node, styled by its role."""
        self.roles_seen.add(role)
        shape, fill, border = ROLE_STYLE[role]
        self.out.append(_node_line(node_id, label=label, shape=shape, style="filled", fillcolor=fill, color=border))

    def leaf_row(self, at: int, lid: str) -> None:
        """Lanes: the leaf joins the middle row. Folded: a row of its own above its op, 4 leaves a row."""
        rows = self.rows
        if self.lanes:
            rows.setdefault(str(at), []).append(lid)
            return
        k = 0
        while len(rows.setdefault(f"{at}:leaves{k}", [])) >= LEAVES_PER_ROW:
            k += 1
        if not rows[f"{at}:leaves{k}"] and k:  # a new row above the last one
            self.out.append(f"{lid} -> {rows[f'{at}:leaves{k - 1}'][0]} [style=invis]")
        rows[f"{at}:leaves{k}"].append(lid)

    def leaves(self) -> None:
        """The leaves: left of the forward lane, or between the lanes at the op they enter."""
        plan, lanes = self.plan, self.lanes
        for label, at in plan.leaf_at.items():
            role = plan.leaf_role.get(label, Role.INPUT)
            desc = self.trace.leaves.get(label, role.value).split(" (")[0]
            self.leaf_node(plan.lid(label), f"{label}\n{desc}" if lanes else label, role)
            if label in plan.left:
                self.op_ids.append(plan.lid(label))
            else:
                self.middle_ids.append(plan.lid(label))
                self.column_of[plan.lid(label)] = str(at)
                self.leaf_row(at, plan.lid(label))
        for key, (at, role, label) in plan.extra.items():
            self.leaf_node(plan.lid(key), label if label == role.value or not lanes else f"{label}\n{role.value}",
                           role)
            self.middle_ids.append(plan.lid(key))
            self.column_of[plan.lid(key)] = str(at)
            self.leaf_row(at, plan.lid(key))

    def outputs(self) -> None:
        """The traced outputs, after their forward op; backward starts from them (dotted)."""
        plan, add = self.plan, self.out.append
        for k, (i, name) in enumerate(_outputs(self.trace)):
            if i not in self.keep:
                continue
            oid = f"out{k}"
            self.leaf_node(oid, name, Role.OUTPUT)
            add(f"{plan.fid(i)} -> {oid} {_attrs(color=FORWARD)}")
            add(f"{plan.rid(i)} -> {oid} {_attrs(color=REVERSE, style='dotted', dir='back', weight='0')}")
            self.op_ids.append(oid)

    def forward_edges(self) -> None:
        """Forward edges, and the reverse lane mirrored (gradient from a consumer's rule to its producer's)."""
        plan, keep, add = self.plan, self.keep, self.out.append
        drawn: set[tuple[str, str]] = set()
        lane_pos = {f"f{i}" if type(i) is int else f"f_{i}": k for k, i in enumerate(self.drawn)}
        all_inputs = self.trace.record.node_columns.inputs
        # the drawn nodes and those with a drawn input (the rest are inside the collapsed box: leaves are labels)
        edged = keep.union(compress(range(len(all_inputs)), map(not_, map(keep.isdisjoint, all_inputs))))
        for index in sorted(edged):
            inputs = all_inputs[index]
            for src in inputs:
                if type(src) is str:  # a leaf (Node.inputs keeps the input order: leaves and nodes mixed)
                    if index not in keep:
                        continue
                    lid = plan.lid(src)
                    if src in plan.left:
                        add(f"{lid} -> {plan.fid(index)} {_attrs(color=FORWARD)}")
                    elif plan.leaf_at.get(src) != index and (lid, plan.fid(index)) not in drawn:
                        add(f"{lid} -> {plan.fid(index)} {_attrs(color=FORWARD, constraint='false')}")
                    drawn.add((lid, plan.fid(index)))
                    continue
                a, b = plan.fid(src), plan.fid(index)
                if a == b or (a, b) in drawn:
                    continue
                drawn.add((a, b))
                add(f"{a} -> {b} {_attrs(color=FORWARD)}")
                if not self.lanes and abs(lane_pos.get(a, 0) - lane_pos.get(b, 0)) > 1:
                    self.long_gradients += 1  # folded: a long gradient edge mirrors its forward edge; drawn once
                    continue
                add(f"{plan.rid(src)} -> {plan.rid(index)} {_attrs(color=REVERSE, dir='back')}")

    def residual_style(self, r: Residual, heavy: set[Residual]) -> dict[str, str]:
        """A residual edge's look: dashed, labelled with the bytes it pins; the heaviest thick."""
        style = {"color": RESIDUAL, "style": "dashed"}
        pinned = format_bytes(r.pinned_nbytes) if r.storage is not None else "0 B"
        if self.lanes and len(self.keep) <= 30:  # folded drawings: the slot names are in each rule's formulas
            style.update(label=f"   {r.slot}\n   {pinned}", fontcolor=RESIDUAL)
        elif len(self.keep) <= 30:
            style.update(label=f" {pinned}", fontcolor=RESIDUAL)
        else:  # a big folded drawing: placed after the layout (narrower than a label laid out with it)
            style.update(xlabel=pinned, fontcolor=RESIDUAL)
        if r in heavy:  # the heaviest: thick, bold
            style.update(penwidth="2.6", fontname="Helvetica-Bold", color="#b35900", fontcolor="#b35900")
        return style

    def residual_edges(self) -> None:
        """Residual edges: from the saved value to the rule that reads it, labelled with the bytes it pins."""
        plan, keep, lanes, add = self.plan, self.keep, self.lanes, self.out.append
        kept = [Node(self.trace._data, i) for i in sorted(keep)]
        drawn_residuals = [r for node in kept for r in node.residuals]
        least = min((r.pinned_nbytes or 0 for r in drawn_residuals), default=0)
        heavy = set(sorted((r for r in drawn_residuals if (r.pinned_nbytes or 0) > least),
                           key=lambda r: -(r.pinned_nbytes or 0))[:HEAVY]) if len(drawn_residuals) > HEAVY else set()
        for node in kept:
            i = node.index
            for r in node.residuals:
                src = plan.residual_source(r)
                if src is None:
                    continue
                style = self.residual_style(r, heavy)
                if src == plan.fid(i):
                    self.column(i, None, style, None)
                elif src in self.middle_ids and self.column_of.get(src) == str(i):
                    first = src not in self.between_done
                    self.between_done.add(src)
                    self.column(i, src, style, {"color": FORWARD} if first else None)
                elif lanes and src.startswith("f") or src in self.op_ids and not lanes:
                    add(f"{plan.rid(i)} -> {src} {_attrs(dir='back', **style)}" if lanes else
                        f"{src} -> {plan.rid(i)} {_attrs(**style)}")
                else:
                    add(f"{plan.rid(i)} -> {src} {_attrs(dir='back', **style)}")

    def straighten(self) -> None:
        """Leaves no rule here read still enter their op; invisible edges keep columns and lanes straight."""
        plan, lanes, add = self.plan, self.lanes, self.out.append
        for key in [*plan.leaf_at, *plan.extra]:
            lid = plan.lid(key)
            if lid in self.middle_ids and lid not in self.between_done:
                at = plan.leaf_at[key] if key in plan.leaf_at else plan.extra[key][0]
                self.column(at, lid, None, {"color": FORWARD})
        for i in self.keep:
            if i not in self.aligned:
                add(f"r{i} -> f{i} [style=invis weight=20]" if lanes else f"f{i} -> r{i} [style=invis]")
        if not lanes:  # folded: keep each lane a straight column, in forward order
            lane_ops = list(dict.fromkeys(plan.fid(i) for i in sorted({*self.keep, *self.layout.groups})))
            for a, b in zip(lane_ops, lane_ops[1:]):
                add(f"{a} -> {b} [style=invis weight=50]")
                add(f"r{a[1:]} -> r{b[1:]} [style=invis weight=50]")

    def ranks(self) -> None:
        """Which ids share a row."""
        add = self.out.append
        if self.lanes:
            add("{rank=same; " + "; ".join(self.rule_ids) + "}")
            if self.middle_ids:
                add("{rank=same; " + "; ".join(self.middle_ids) + "}")
            add("{rank=same; " + "; ".join(self.op_ids) + "}")
        else:
            for ids in self.rows.values():
                add("{rank=same; " + "; ".join(ids) + "}")


def _title(trace: TraceData, layout: _Layout, long_gradients: int, chars: int) -> list[str]:
    """The drawing's title lines: the summary, what collapsed, the layout and the reverse order."""
    title = f"tracekit: {trace.summary()}"
    if layout.hidden:
        title += f"\n{layout.collapsed}"
    where = ("reverse rules (top) above the forward ops they reverse (bottom)" if layout.lanes else
             "folded: forward ops run down the left, reverse rules up the right, each rule beside its op"
             + (f" ({long_gradients} long gradient edges mirror their forward edges, not drawn twice)"
                if long_gradients else ""))
    kept = trace.retained_words()
    order = "observed order" + kept if trace.steps else "expected order: backward not run yet"
    title += f"\n{where}; reverse in {order}"
    return [part for line in title.split("\n") for part in textwrap.wrap(line, chars) or [""]]


def _html_label(trace: TraceData, plan: _Plan, title: list[str], roles: set[Role], width: int) -> str:
    """Stage 3, with system `dot`: the title, legend and lifetime strip as one HTML-like label."""
    return ('<<table border="0" cellspacing="0" cellpadding="1">'
            + "".join(f'<tr><td align="left" colspan="3"><font point-size="10">{escape(line)}</font></td></tr>'
                      for line in title)
            + _legend(roles, width)
            + '<tr><td colspan="3" height="6"></td></tr>'
            + '<tr><td align="left" colspan="3"><table border="0" cellspacing="1" cellpadding="0">'
            + (_lifetime_strip(trace, plan) if _strip_fits(trace, plan, width) else _no_strip())
            + "</table></td></tr></table>>")


def _text_label(trace: TraceData, plan: _Plan, title: list[str], roles_seen: set[Role], width: int,
                chars: int) -> str:
    """Stage 3 without HTML labels (the WebAssembly build): the same facts as left-aligned text lines."""
    looks = {Role.INPUT: "green ellipse", Role.PARAMETER: "purple box", Role.CONSTANT: "grey note",
             Role.OUTPUT: "red double circle"}
    roles = ", ".join(f"{role.value}: {looks[role]}" for role in looks if role in roles_seen)
    lines = [*title, "grey: forward ops · blue: reverse rules · orange dashed: residual (saved value"
             f" → the rule that reads it){' · ' + roles if roles else ''}",
             *(_plain_lifetimes(trace, plan) if _strip_fits(trace, plan, width) else [_NO_STRIP])]
    lines = [part for line in lines for part in textwrap.wrap(line, chars, subsequent_indent="    ") or [""]]
    return _q("\n".join(lines)).replace("\\n", "\\l")[:-1] + '\\l"'


def _digraph(label: str, lines: list[str]) -> graphviz.Digraph:
    """The graphviz object: the graph's look, its label and the node and edge lines."""
    g = graphviz.Digraph("trace")
    g.attr(rankdir="TB", fontname="Helvetica", fontsize="10", labelloc="b", labeljust="l", newrank="true",
           nodesep="0.16", ranksep="0.25", pad="0.06", outputorder="edgesfirst")
    g.attr("node", fontname="Helvetica", fontsize="10", shape="box", style="rounded", margin="0.06,0.04")
    g.attr("edge", fontname="Helvetica", fontsize="9", arrowsize="0.7")
    g.body.append(f"\tlabel={label}\n")
    g.body.extend(f"\t{line}\n" for line in lines)
    return g


def _trace_graph(trace: TraceData, max_nodes: int, width: int, html: bool | None,
                 fold: bool | None) -> graphviz.Digraph:
    """Build the graphviz drawing of a trace for a place `width` px wide, at full size (big traces
    fold top to bottom; runs of view ops that save nothing, repeated blocks or the middle of a
    long trace collapse into boxes), in stages: the layout, the DOT text, the label (HTML or text).
    `html`: draw the legend and lifetime strip as an HTML-like label (default: when system `dot`
    renders; the WebAssembly build has no HTML labels, so it gets the same facts as text lines).
    `fold`: force the folded (True) or lanes (False) layout."""
    if html is None:
        from .svg import renderer

        html = renderer() == "dot"
    layout = _layout(trace, max_nodes, width, fold)
    if layout is None:  # close: lay out as lanes, measure, fold if it does not fit
        lanes_drawing = _trace_graph(trace, max_nodes, width, html, False)
        return lanes_drawing if _measured_width(lanes_drawing.source) <= width else \
            _trace_graph(trace, max_nodes, width, html, True)
    dot = _Dot(trace, layout)
    lines = dot.lines()
    chars = max(40, int((width * 0.75 - 24) / 5.9))  # 10 pt characters that fit inside the margins (wide glyphs)
    title = _title(trace, layout, dot.long_gradients, chars)
    label = (_html_label(trace, layout.plan, title, dot.roles_seen, width) if html else
             _text_label(trace, layout.plan, title, dot.roles_seen, width, chars))
    return _digraph(label, lines)
