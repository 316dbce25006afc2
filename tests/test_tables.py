"""Tables a user can query (issue 30): residuals sorted by the bytes only the graph keeps, the
first few, per module of the captured model; text lines within 100 characters."""

import pytest
import torch
from real_models import MODELS

import tracekit as tk
from tracekit.errors import TableArgumentError
from tracekit.storage import format_bytes


def _graph_only(tr):
    """Truth from the storages themselves: a storage no parameter, output or named variable holds."""
    return {s: s.nbytes for s in tr.storages if not (s.is_parameter or s.is_output or s.names)}


def test_sorted_by_bytes_and_top():
    tr = MODELS["cnn"]()
    only = _graph_only(tr)
    table = tr.table(sort="bytes", top=10)
    assert len(table.rows) == 10 and table.caption.startswith(f"10 of {len(tr.residuals)} residuals")
    expected = sorted(tr.residuals, key=lambda r: (-only.get(r.storage, 0), -(r.pinned_nbytes or 0)))[:10]
    assert [row[:2] for row in table.rows] == [(f"#{r.node.index} {r.node.name}", r.slot) for r in expected]
    # the largest rows are activations, not parameter views
    assert all(only.get(r.storage, 0) > 0 for r in expected[:5])
    assert table.rows[0][5] == format_bytes(max(only.values()))
    pinned = tr.table(sort="pinned", top=3)
    assert [row[5] for row in pinned.rows] == [format_bytes(b) for b in
                                               sorted((r.pinned_nbytes or 0 for r in tr.residuals), reverse=True)[:3]]
    assert len(tr.table().rows) == len(tr.residuals) and tr.table().caption is None


@pytest.mark.parametrize("kwargs", [{"sort": "size"}, {"top": 0}, {"top": "3"}])
def test_bad_table_arguments_say_what_to_pass(kwargs):
    tr = MODELS["mlp"]()
    with pytest.raises(TableArgumentError):
        tr.table(**kwargs)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_text_lines_fit_100_characters(model):
    tr = MODELS[model]()
    for observed in (False, True):
        if observed:
            tr.backward()
        for text in (tr.text(), str(tr.table()), str(tr.table(sort="bytes", top=10)), str(tr.by_module())):
            assert max(len(line) for line in text.split("\n")) <= 100
    # the wrapped text still carries every fact: each residual's rule and free point
    flat = " ".join(tr.text().split())
    assert all(" ".join(r.rule.split()) in flat for r in tr.residuals)


def test_html_tables_wrap():
    html = MODELS["encoder"]().table()._repr_html_()
    assert "max-width:100%" in html and "white-space:normal;overflow-wrap:normal;word-break:normal" in html
    assert "anywhere" not in html and "break-all" not in html  # never inside a word (the browser test measures it)


def test_module_paths_come_from_the_capture():
    tr = MODELS["encoder"]()
    modules = {n.module for n in tr.nodes}
    assert {"self_attn (MultiheadAttention)", "linear1 (Linear)", "linear2 (Linear)", "norm1 (LayerNorm)",
            "norm2 (LayerNorm)", "TransformerEncoderLayer"} <= modules
    assert None in modules  # the loss, outside any module
    assert not torch.nn.modules.module._global_forward_pre_hooks  # capture's hooks are gone
    assert not torch.nn.modules.module._global_forward_hooks


def test_module_hooks_go_away_when_the_forward_raises():
    conv = torch.nn.Conv2d(3, 4, 3)
    with pytest.raises(RuntimeError), tk.capture():
        conv(torch.randn(2, 5, 8, 8))  # wrong channel count
    assert not torch.nn.modules.module._global_forward_pre_hooks
    with tk.capture() as cap:
        y = conv(torch.randn(1, 3, 8, 8)).sum()
    assert cap.trace(y).nodes[0].module == "Conv2d"


def test_by_module_counts_each_modules_residuals_and_bytes():
    tr = MODELS["cnn"]()
    only = _graph_only(tr)
    table = tr.by_module()
    assert table.caption.endswith("predicted: backward not run yet")
    rows = {row[0]: row for row in table.rows}
    assert {"0 (Conv2d)", "1 (BatchNorm2d)", "2 (ReLU)", "3 (MaxPool2d)", "9 (Linear)"} <= set(rows)
    prediction = tr.predict_backward()
    for module, row in rows.items():
        nodes = [n for n in tr.nodes if (n.module or "(outside modules)") == module]
        storages = {r.storage for n in nodes for r in n.residuals if r.storage is not None}
        assert row[1:4] == (str(len(nodes)), str(sum(len(n.residuals) for n in nodes)),
                            format_bytes(sum(only.get(s, 0) for s in storages)))
        steps = sorted({prediction.freed_at[s] for s in storages if s in only and s in prediction.freed_at})
        if steps:
            assert row[5].startswith(str(steps[0]))
    graph = [sum(only.get(s, 0) for s in {r.storage for n in tr.nodes if (n.module or "(outside modules)") == row[0]
                                           for r in n.residuals}) for row in table.rows]
    assert graph == sorted(graph, reverse=True)
    tr.backward()
    observed = {row[0]: row for row in tr.by_module().rows}
    norm = observed["1 (BatchNorm2d)"]
    freed = {r.freed_at for n in tr.nodes if n.module == "1 (BatchNorm2d)" for r in n.residuals
             if r.storage in only}
    assert len(freed) == 1 and norm[5] == str(freed.pop())
    assert tr.by_module().caption.endswith("observed")


def test_long_names_break_between_their_words_only():
    """A table cell may break a long name only between its words (camel case, underscores, dots, after a
    call's parenthesis), so a real model's table fits a notebook cell without splitting `Backward`."""
    import re

    from tracekit.render.table import _breakable

    cases = {"MaxPool2DWithIndicesBackward0": ["Max", "Pool2D", "With", "Indices", "Backward0"],
             "max_pool2d_with_indices_backward(grad_output,": ["max_", "pool2d_", "with_", "indices_", "backward(",
                                                                "grad_", "output,"],
             "transformer.h.0.attn.c_attn": ["transformer.", "h.0.", "attn.", "c_attn"],  # never before a digit
             "grad_other = grad * self": ["grad_other = grad * self"],
             "scale 1.5 and 0.25": ["scale 1.5 and 0.25"]}
    for text, pieces in cases.items():
        out = _breakable(text)
        assert out.split("<wbr>") == pieces, (text, out)
        assert not re.search(r"[a-z]<wbr>[a-z]", out)  # never inside a lowercase word
