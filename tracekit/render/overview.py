"""A real model's first picture: its modules collapsed to boxes (ops, residuals, the bytes only the
graph keeps, the steps that free them), repeated blocks (`h.0`, `h.1`, ...) drawn once with their
count, so a 2-layer GPT-2 fits a 1280 x 900 screen at 100 %; and one module's full drawing (every
op, every residual with its bytes and free point), for the box a reader wants to open."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import graphviz

from ..errors import ModuleNotInTraceError
from ..reader import Node, TraceData
from ..storage import format_bytes
from .table import graph_only_bytes

MAX_BOXES = 10  # boxes in an overview: a chain of this many, three lines each, fits 900 px tall
OUTSIDE = "(outside modules)"
_INDEX = re.compile(r"^\d+$")


def _path(node: Node) -> tuple[str, ...]:
    """A node's module as path segments: `("transformer", "h", "0", "attn")`; the outermost
    module's own ops `()`; ops outside every module, and modules made during the call, one segment."""
    label = node.module
    if label is None:
        return (OUTSIDE,)
    path, _, kind = label.rpartition(" (")
    if not path:
        return ()
    if kind == "made during the call)":
        return (label,)
    return tuple(path.split("."))


@dataclass
class _Box:
    """One box: a module (or a run of repeated blocks), the nodes inside it."""

    key: tuple[str, ...]
    nodes: list[Node] = field(default_factory=list)
    count: int = 1  # repeated blocks drawn as one
    last: str | None = None  # the last block's index, for `h.0–1`

    def signature(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


def _kinds(trace: TraceData) -> dict[tuple[str, ...], str]:
    kinds: dict[tuple[str, ...], str] = {}
    for n in trace.nodes:
        if n.module is not None and " (" in n.module and not n.module.endswith("made during the call)"):
            path, _, kind = n.module.rpartition(" (")
            kinds[tuple(path.split("."))] = kind.rstrip(")")
    return kinds


def _split(box: _Box, depth: int) -> list[_Box]:
    """The box's nodes by their module one level deeper (its own ops stay in a box of its key)."""
    parts: dict[tuple[str, ...], _Box] = {}
    for n in box.nodes:
        path = _path(n)
        key = path[:depth + 1] if len(path) > depth else box.key
        parts.setdefault(key, _Box(key)).nodes.append(n)
    return list(parts.values())


def _merge_repeats(boxes: list[_Box]) -> list[_Box]:
    """Consecutive sibling blocks `parent.0`, `parent.1`, ... that ran the same ops: one box."""
    out: list[_Box] = []
    for box in (_Box(b.key, list(b.nodes), b.count, b.last) for b in boxes):  # copies: a rejected try changes nothing
        prev = out[-1] if out else None
        if (prev is not None and box.key and prev.key and _INDEX.match(box.key[-1]) and
                prev.key[:-1] == box.key[:-1] and _INDEX.match(prev.key[-1]) and
                prev.signature()[:len(box.nodes)] == box.signature() and
                len(prev.nodes) == len(box.nodes) * prev.count):
            prev.count += 1
            prev.last = box.key[-1]
            prev.nodes.extend(box.nodes)
            continue
        out.append(box)
    return out


def wants_overview(trace: TraceData, max_nodes: int = 100) -> bool:
    """Whether a trace's first picture is the overview: captured, with modules, over `max_nodes` ops."""
    return len(trace.nodes) > max_nodes and sum(n.module is not None for n in trace.nodes) > 1


def overview_boxes(trace: TraceData, max_boxes: int = MAX_BOXES) -> list[_Box]:
    """The boxes of the overview in forward order: modules opened one level at a time, the
    heaviest first, as long as the boxes (repeats merged) stay at most `max_boxes`."""
    boxes = _merge_repeats(sorted(_split(_Box((), list(trace.nodes)), 0), key=lambda b: b.nodes[0].index))
    only = graph_only_bytes(trace)
    while True:
        opened = False
        for box in sorted(boxes, key=lambda b: -_bytes(b, only)):
            if box.count > 1 or len(box.key) >= max(len(_path(n)) for n in box.nodes):
                continue  # a repeated block stays shut (its own drawing opens it); nothing deeper
            parts = _split(box, len(box.key))
            candidate = [b for b0 in boxes for b in ([*parts] if b0 is box else [b0])]
            candidate = _merge_repeats(sorted(candidate, key=lambda b: b.nodes[0].index))
            progress = len(candidate) > len(boxes) or [b.key for b in candidate] != [b.key for b in boxes]
            if len(candidate) <= max_boxes and progress:
                boxes, opened = candidate, True
                break
        if not opened:
            return boxes


def _bytes(box: _Box, only: dict) -> int:
    return sum(only[s] for s in {r.storage for n in box.nodes for r in n.residuals if r.storage is not None})


def _name(box: _Box, kinds: dict[tuple[str, ...], str]) -> str:
    if not box.key:
        root = next((n.module for n in box.nodes if n.module and " (" not in n.module), "the model")
        return f"{root}'s own ops"
    if box.key == (OUTSIDE,) or len(box.key) == 1 and box.key[0].endswith(")"):
        return box.key[0]
    name = ".".join(box.key)
    if box.count > 1:
        name = f"{name}–{box.last}"
    kind = kinds.get(box.key)
    return f"{name} ({kind})" if kind else name


def _free_steps(trace: TraceData, nodes: list[Node], only: dict) -> str:
    lifetimes = trace.lifetimes()
    steps = sorted({lifetimes.residuals[r.index].freed_at for n in nodes for r in n.residuals
                    if r.storage is not None and only[r.storage]} - {None})
    if not steps:
        return "frees nothing of its own"
    return f"freed after step {steps[0]}" if len(steps) == 1 else f"freed after steps {steps[0]}–{steps[-1]}"


def _count(k: int, word: str) -> str:
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


NEWLINE, NEWLINE_QUOTED = "\\n", "\\\\n"  # DOT's line break, and as _q escapes it


def overview_graph(trace: TraceData, max_boxes: int = MAX_BOXES) -> graphviz.Source:
    """The model's modules as boxes in forward order (its first picture; at full size)."""
    boxes = overview_boxes(trace, max_boxes)
    kinds, only = _kinds(trace), graph_only_bytes(trace)
    box_of = {n.index: k for k, box in enumerate(boxes) for n in box.nodes}
    source = "observed" if not trace.lifetimes().predicted else "predicted"
    lines = ["digraph overview {", "rankdir=TB; nodesep=0.25; ranksep=0.22;",
             'node [shape=box, style="rounded,filled", fillcolor="#f4f6fb", fontname="Helvetica", fontsize=11];',
             'edge [color="#8a94a6", arrowsize=0.6];',
             "labelloc=t; fontname=Helvetica; fontsize=12; label=" + _q(
                 f"{len(trace.nodes)} ops in {len(boxes)} boxes: bytes only the graph keeps, free steps {source}"
                 f"{NEWLINE}tr.draw_module(path) opens one").replace(NEWLINE_QUOTED, NEWLINE) + ";"]
    for k, box in enumerate(boxes):
        residuals = sum(len(n.residuals) for n in box.nodes)
        per = f" ×{box.count}" if box.count > 1 else ""
        size = _bytes(box, only)
        each = f" ({format_bytes(size // box.count)} each)" if box.count > 1 else ""
        label = (f"{_name(box, kinds)}{per}\\n{_count(len(box.nodes), 'op')}, {_count(residuals, 'residual')}, "
                 f"{format_bytes(size)}{each}\\n{_free_steps(trace, box.nodes, only)}")
        lines.append(f"b{k} [label={_q(label).replace(NEWLINE_QUOTED, NEWLINE)}];")
    edges = sorted({(box_of[i], box_of[n.index]) for n in trace.nodes for i in n.input_nodes
                    if box_of[i] != box_of[n.index]})
    lines += [f"b{a} -> b{b};" for a, b in edges]
    lines.append("}")
    return graphviz.Source("\n".join(lines))


def module_graph(trace: TraceData, path: str) -> graphviz.Source:
    """One module's full drawing: each op it ran (with its rule) and each residual with its bytes
    and free point; ops of other modules that feed it drawn as small grey inputs."""
    want = tuple(path.split(".")) if path else ()
    nodes = [n for n in trace.nodes if _path(n)[:len(want)] == want]
    if not nodes:
        known = sorted({".".join(_path(n)) for n in trace.nodes})[:12]
        raise ModuleNotInTraceError(
            f"no op of this trace was made by module {path!r}: pass a path from tr.by_module(), e.g. "
            + ", ".join(repr(k) for k in known))
    inside = {n.index for n in nodes}
    lifetimes = trace.lifetimes()
    lines = ["digraph module {", "rankdir=TB; nodesep=0.2; ranksep=0.25;",
             'node [shape=box, style=rounded, fontname="Helvetica", fontsize=10];',
             'edge [color="#8a94a6", arrowsize=0.6];',
             "labelloc=t; fontname=Helvetica; fontsize=12; label=" + _q(
                 f"module {path or '(the model)'}: {len(nodes)} ops")]
    feeds = set()
    for n in nodes:
        lines.append(f"n{n.index} [label={_q(f'#{n.index} {n.name}')}];")
        for i in n.input_nodes:
            if i not in inside:
                feeds.add(i)
            lines.append(f"n{i} -> n{n.index};")
        for r in n.residuals:
            where = "recomputed" if r.storage is None else format_bytes(r.pinned_nbytes or 0)
            words = lifetimes.residuals[r.index].words()
            lines.append(f"r{r.index} [shape=note, fontsize=9, label={_q(f'{r.slot} {where}: {words}')}];")
            lines.append(f'r{r.index} -> n{n.index} [style=dashed, arrowhead=none];')
    for i in sorted(feeds):
        other = trace.nodes[i]
        text = f"#{i} {other.name} ({other.module or OUTSIDE})"
        lines.append(f"n{i} [color=grey, fontcolor=grey, label={_q(text)}];")
    lines.append("}")
    return graphviz.Source("\n".join(lines))
