"""The trace drawing: forward lane, reverse lane, and each residual as a labelled edge
from the op that produced it to the rule that reads it."""

from __future__ import annotations

from collections import Counter

import graphviz
import numpy as np

from ..model import Node, Residual, Trace
from ..storage import format_bytes

FORWARD, REVERSE, RESIDUAL = "#555555", "#1f5fbf", "#d9731a"
COLLAPSED = "collapsed"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _repeats(ops: list[str], max_period: int = 400) -> tuple[int, int, int] | None:
    """(start, period, count) of the longest stretch of a block of ops repeated back to back
    (a stack of identical layers), if it covers most of the trace."""
    n = len(ops)
    names = {op: i for i, op in enumerate(dict.fromkeys(ops))}
    if len(names) < 2:
        return None
    codes = np.fromiter((names[op] for op in ops), dtype=np.int32, count=n)
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


def _shown(trace: Trace, max_nodes: int) -> tuple[set[int], list[Node], str]:
    """Which node indexes are drawn, which collapse into one box, and a sentence saying so.
    Repeated blocks (identical layers) keep their first copy; otherwise the middle of a long
    trace collapses."""
    n = len(trace.nodes)
    if n <= max_nodes:
        return set(range(n)), [], ""
    found = _repeats([node.name for node in trace.nodes])
    if found is not None:
        start, period, count = found
        first_end, repeats_end = start + period, start + count * period
        keep = set(range(first_end)) | set(range(repeats_end, n))
        if len(keep) <= 2 * max_nodes:
            hidden = [node for node in trace.nodes if node.index not in keep]
            return keep, hidden, (f"{count} repeated blocks of {period} nodes: showing the first, "
                                  f"{count - 1} blocks ({len(hidden)} nodes) collapsed")
    head = max_nodes // 2
    keep = set(range(head)) | set(range(n - (max_nodes - head), n))
    hidden = [node for node in trace.nodes if node.index not in keep]
    ops = ", ".join(f"{op} ×{k}" for op, k in Counter(node.op for node in hidden).most_common(4))
    return keep, hidden, f"showing {len(keep)} of {n} nodes; {len(hidden)} collapsed ({ops}, ...)"


def _residual_label(r: Residual) -> str:
    pinned = format_bytes(r.pinned_nbytes) if r.storage is not None else "0 B"
    where = "" if r.held_in == "graph" else f"\\n{r.held_in}"
    return f"{r.slot}: {format_bytes(r.nbytes)} visible / {pinned} pinned\\n{r.free_point()}{where}"


def trace_graph(trace: Trace, max_nodes: int = 60) -> graphviz.Digraph:
    """Build the graphviz drawing of a trace (big traces: the middle nodes collapse into one box)."""
    keep, hidden, collapsed = _shown(trace, max_nodes)
    g = graphviz.Digraph("trace")
    g.attr(rankdir="LR", fontname="Helvetica", fontsize="11", labelloc="t", newrank="true")
    g.attr("node", fontname="Helvetica", fontsize="10", shape="box", style="rounded")
    g.attr("edge", fontname="Helvetica", fontsize="9")
    title = f"tracekit: {trace.summary()}"
    if hidden:
        title += f"\\n{collapsed}"
    g.attr(label=_esc(title).replace("\\\\n", "\\n"))

    def fid(i: int | str) -> str:
        if isinstance(i, str):
            return f"in_{i}"
        return f"f{i}" if i in keep else f"f_{COLLAPSED}"

    def rid(i: int) -> str:
        return f"r{i}" if i in keep else f"r_{COLLAPSED}"

    step_of = {s.node.index: s.index for s in trace.steps}
    order = [s.node.index for s in trace.steps] or [n.index for n in reversed(trace.nodes)]
    listed = set(order)
    order += [n.index for n in reversed(trace.nodes) if n.index not in listed]

    with g.subgraph(name="cluster_reverse") as rv:
        kept = " (retain_graph: nothing released)" if trace.retained else ""
        label = "reverse (observed order)" + kept if trace.steps else "reverse (expected order; not run yet)"
        rv.attr(label=label, color=REVERSE, style="rounded")
        previous = None
        for index in order:
            node = trace.nodes[index]
            if index not in keep:
                if previous == rid(index):
                    continue
                rv.node(rid(index), f"… {len(hidden)} rules collapsed …", style="dashed")
            else:
                step = f"step {step_of[index]} · " if index in step_of else ""
                rule_lines = sorted({r.rule for r in node.residuals}) or ["no residual: reads only grad"]
                body = "\\n".join(_esc(x) for x in rule_lines)
                ran = {} if index in step_of or not trace.steps else {"fontcolor": "#999999"}
                rv.node(rid(index), f"{step}{_esc(node.name)}\\n{body}", color=REVERSE, **ran)
            if previous is not None:
                rv.edge(previous, rid(index), style="invis", weight="10")
            previous = rid(index)

    with g.subgraph(name="cluster_forward") as fw:
        fw.attr(label="forward (execution order)", color=FORWARD, style="rounded")
        previous = None
        for node in trace.nodes:
            if node.index not in keep:
                if previous == fid(node.index):
                    continue
                fw.node(fid(node.index), f"… {len(hidden)} nodes collapsed …", style="dashed")
            else:
                where = f"\\n{_esc(node.source)}" if node.source else ""
                fw.node(fid(node.index), f"#{node.index} {_esc(node.op)}{where}", color=FORWARD)
            if previous is not None:
                fw.edge(previous, fid(node.index), style="invis", weight="10")
            previous = fid(node.index)

    # edge labels take part in the layout (clean, but slow for many edges); big drawings place
    # them after the layout instead (xlabel), which keeps a 100-node drawing well under a second
    label_attr = "label" if len(keep) <= 30 else "xlabel"
    drawn: set[tuple[str, str]] = set()
    for node in trace.nodes:
        for src in node.inputs:
            if isinstance(src, str) and node.index not in keep:
                continue  # the parameters of collapsed blocks stay out of the picture
            a, b = fid(src), fid(node.index)
            if isinstance(src, str) and (a, a) not in drawn:
                g.node(a, _esc(f"{src}\\n{trace.leaves.get(src, 'input')}").replace("\\\\n", "\\n"), shape="ellipse")
                drawn.add((a, a))
            if a != b and (a, b) not in drawn:
                g.edge(a, b, color=FORWARD, constraint="false" if not isinstance(src, str) else "true")
                drawn.add((a, b))
            if not isinstance(src, str) and (rid(node.index), rid(src)) not in drawn and rid(src) != rid(node.index):
                g.edge(rid(node.index), rid(src), color=REVERSE, style="dotted", constraint="false")
                drawn.add((rid(node.index), rid(src)))
        if node.index not in keep:
            continue
        for r in node.residuals:
            src = r.producer if r.producer is not None else node.index
            if isinstance(src, str) and (fid(src), fid(src)) not in drawn:
                g.node(fid(src), _esc(src), shape="ellipse")
                drawn.add((fid(src), fid(src)))
            g.edge(fid(src), rid(node.index), **{label_attr: _residual_label(r)}, color=RESIDUAL,
                   fontcolor=RESIDUAL, style="dashed", constraint="false")
    return g
