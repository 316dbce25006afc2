"""A model's first picture (issue 38): modules collapsed to boxes with the bytes only the graph
keeps and the steps that free them, repeated blocks drawn once with their count, at 100 % inside a
1280 x 900 screen; one module's full drawing on request."""

import re

import pytest
import torch
from torch import nn

import tracekit as tk
from tracekit.render.overview import overview_boxes
from tracekit.render.svg import render_svg
from tracekit.render.table import graph_only_bytes


def _stack(blocks: int = 3) -> tk.Trace:
    torch.manual_seed(0)
    model = nn.Sequential(*[tk.transformer.GPTBlock(32, 4) for _ in range(blocks)], nn.LayerNorm(32), nn.Linear(32, 10))
    x = torch.randn(2, 8, 32, requires_grad=True)
    with tk.capture() as cap:
        loss = model(x).logsumexp(-1).mean()
    tr = cap.trace(loss)
    tr.loss, tr.model = loss, model  # the output held, as a user's variable would
    return tr


def _size_px(svg: str) -> tuple[float, float]:
    found = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    return float(found.group(1)) * 4 / 3, float(found.group(2)) * 4 / 3


@pytest.mark.parametrize("blocks", [2, 3, 5])
def test_repeated_blocks_are_one_box_with_their_count_and_it_fits_a_screen(blocks):
    tr = _stack(blocks)
    tr.backward()
    boxes = overview_boxes(tr)
    (block,) = [b for b in boxes if b.count > 1]
    assert block.count == blocks and block.key == ("0",) and block.last == str(blocks - 1)
    assert sorted(n.index for b in boxes for n in b.nodes) == list(range(len(tr.nodes)))  # every op in one box
    src = tr.overview().source
    assert f"0–{blocks - 1} (GPTBlock) ×{blocks}" in src and not re.search(r"\bsize=", src)  # never scaled to fit
    width, height = _size_px(render_svg(src))
    assert width <= 1280 and height <= 900


def test_box_bytes_and_free_steps_come_from_the_lifetimes():
    tr = _stack()
    tr.backward()
    only = graph_only_bytes(tr)
    boxes = overview_boxes(tr)
    storages = [{r.storage for n in b.nodes for r in n.residuals if r.storage is not None} for b in boxes]
    assert sum(sum(only[s] for s in group) for group in storages) == sum(only.values())  # no storage in two boxes
    src = tr.overview().source
    for group in storages:
        steps = sorted({r.freed_at for s in group if only[s] for r in s.residuals} - {None})
        if len(steps) > 1:
            assert f"freed after steps {steps[0]}–{steps[-1]}" in src
        size = tk.storage.format_bytes(sum(only[s] for s in group))
        assert size in src


def test_one_modules_full_drawing_and_a_wrong_path():
    tr = _stack()
    tr.backward()
    src = tr.draw_module("1").source  # the second block, its submodules' ops included
    mine = [n for n in tr.nodes if (n.module or "").startswith(("1 (", "1."))]
    assert mine and all(f"#{n.index} {n.name}" in src for n in mine)
    words = [tr.lifetimes().residuals[r.index].words() for n in mine for r in n.residuals]
    assert words and all(w in src for w in words)
    with pytest.raises(tk.errors.ModuleNotInTraceError, match="tr.by_module"):
        tr.draw_module("9.attn")


def test_a_big_captured_models_repr_shows_the_overview_a_small_one_the_full_drawing():
    big = _stack(3)
    assert len(big.nodes) > 100 and "×3" in big._repr_mimebundle_()["image/svg+xml"]
    small = tk.trace((torch.randn(3, requires_grad=True).exp() * 2).sum())
    assert "ExpBackward0" in small._repr_mimebundle_()["image/svg+xml"]
