"""Drawings of real models that read at 100 % (issue 30): never scaled, every rule named, each
residual edge labelled with the bytes it pins (the heaviest thick), runs of view ops collapsed
so the attention softmax stays in view; a drawing wider than a cell scrolls, never shrinks."""

import re
import shutil

import pytest
from real_models import MODELS

from tracekit.render.dot import HEAVY, WIDTH, trace_graph
from tracekit.render.svg import render_svg, scrolling_html, svg_width_px
from tracekit.storage import format_bytes

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="system Graphviz not installed")


@pytest.mark.parametrize("model", ["mlp", "encoder", "cnn", "lstm", "gpt"])
def test_every_residual_edge_carries_its_bytes_and_no_text_is_scaled(model):
    tr = MODELS[model]()
    tr.backward()
    src = trace_graph(tr, html=True).source
    assert not re.search(r"\bsize=", src.split("\n", 2)[1])  # no shrink-to-fit on the graph
    assert "not described" not in src and "fontsize=10" in src
    edges = [line for line in src.split("\n") if 'style="dashed"' in line and "->" in line]
    drawn = [r for n in tr.nodes for r in n.residuals if f"r{n.index} " in src or f"-> r{n.index} " in src]
    assert len(edges) == len(drawn) > 0
    for line in edges:
        assert re.search(r'(x?label)="[^"]*\d+(\.\d+)? (B|KiB|MiB)"', line), line
    heavy = [line for line in edges if 'penwidth="2.6"' in line]
    assert 0 < len(heavy) <= HEAVY
    most = max(r.pinned_nbytes or 0 for r in drawn)
    assert any(format_bytes(most) in line for line in heavy)


def test_the_encoders_attention_softmax_stays_and_view_runs_collapse():
    tr = MODELS["encoder"]()
    src = trace_graph(tr, html=True).source
    assert "safe_softmax" in src and "SafeSoftmaxBackward0" in src and "_softmax_backward_data" in src
    boxes = re.findall(r'f_v\d+ \[label="#(\d+)–#(\d+): (\d+) view ops', src)
    assert len(boxes) >= 3 and all(int(b) - int(a) + 1 == int(k) for a, b, k in boxes)
    assert "view/reshape ops that save nothing drawn as" in src


@needs_dot
def test_a_drawing_wider_than_a_cell_scrolls_at_full_size():
    small = MODELS["mlp"]()
    svg = render_svg(trace_graph(small, html=True).source)
    assert svg_width_px(svg) <= WIDTH and scrolling_html(svg, WIDTH) is None
    wide = render_svg(trace_graph(MODELS["encoder"](), html=True).source)
    px = svg_width_px(wide)
    html = scrolling_html(wide, WIDTH)
    assert px > WIDTH and html is not None  # measured: the encoder folded is wider than a cell
    assert "overflow-x:auto" in html and f'width="{px:.0f}"' in html and "max-width:none" in html
    bundle = MODELS["encoder"]()._repr_mimebundle_()
    assert "text/html" in bundle and "image/svg+xml" in bundle
