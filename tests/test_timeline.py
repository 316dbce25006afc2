"""Memory over the reverse pass (issue 30): bytes alive per reverse step, stacked by residual,
predicted before backward and observed after, checked against the storages' own lifetimes."""

import torch
from real_models import MODELS

import tracekit as tk
from tracekit.render.timeline import HELD, NAMED, differences, memory_by_step


def _program():
    """A chain whose named tensors stay alive in this frame (so the prediction can know them)."""
    x = torch.randn(64, 32, requires_grad=True)
    w1, w2 = torch.randn(32, 48, requires_grad=True), torch.randn(48, 8, requires_grad=True)
    with tk.capture() as cap:
        loss = (torch.tanh(x @ w1) @ w2).relu().exp().sum()
    return cap.trace(loss), (x, w1, w2, loss)


def test_before_backward_every_residual_byte_is_alive_and_the_prediction_frees_them():
    tr, _keep = _program()
    m = memory_by_step(tr)
    assert m.kind == "predicted" and len(m.steps) == len(tr.nodes)
    assert m.total[0] == tr.saved_bytes  # every distinct storage, counted once
    graph_only = sum(s.nbytes for s in tr.graph_owned_storages())
    assert m.total[-1] == tr.saved_bytes - graph_only > 0  # the leaves' bytes stay
    assert list(m.total) == sorted(m.total, reverse=True)  # backward only frees residuals
    assert m.peak == (0, tr.saved_bytes)
    assert m.bands[0].label == HELD


def test_observed_steps_follow_the_runtime_and_match_the_prediction():
    tr, keep = _program()
    predicted = memory_by_step(tr, "predicted")
    tr.backward()
    observed = memory_by_step(tr, "observed")
    assert observed.kind == "observed" and observed.steps == tuple(f"#{s.node.index} {s.node.name}" for s in tr.steps)
    # the runtime's own answer after backward: the storages whose weak reference is still alive
    assert observed.total[-1] == sum(s.nbytes for s in tr.storages if not s.expired())
    assert observed.total == predicted.total and differences(predicted, observed) == []
    assert memory_by_step(tr, "predicted").total == predicted.total  # the prediction is of the traced state
    del keep


def test_retain_graph_frees_nothing():
    tr, _keep = _program()
    tr.backward(retain_graph=True)
    observed, predicted = memory_by_step(tr), memory_by_step(tr, "predicted")
    assert set(observed.total) == {tr.saved_bytes} and predicted.total == observed.total


def test_a_big_trace_names_the_largest_and_groups_the_rest():
    tr = MODELS["encoder"]()
    m = memory_by_step(tr)
    named = [b for b in m.bands[2:]]
    assert len(named) == NAMED and m.bands[1].label.startswith("other residuals")
    largest = max(tr.graph_owned_storages(), key=lambda s: s.nbytes)
    assert m.bands[-1].label.startswith(largest.residuals[0].label) and m.bands[-1].alive[0] == largest.nbytes
    assert m.total[0] == tr.saved_bytes


def test_a_variable_that_died_shows_as_a_difference():
    tr = MODELS["mlp"]()  # the model's input `x` was a local of a function that returned
    tr.backward()
    diff = differences(memory_by_step(tr, "predicted"), memory_by_step(tr))
    assert any(d.startswith("#1 AddmmBackward0.mat1: predicted kept, observed freed after step") for d in diff)


def test_the_figure_fits_a_cell_and_marks_the_peak():
    tr, _keep = _program()
    fig = tr.timeline()
    assert len(fig.axes) == 1 and fig.get_size_inches()[0] * 100 <= 848
    tr.backward()
    fig = tr.timeline()
    assert len(fig.axes) == 2
    assert [ax.get_title(loc="left").split(":")[0] for ax in fig.axes] == ["predicted", "observed"]
    assert "as predicted, at every step" in fig.axes[1].get_title(loc="left")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any(t.startswith(f"peak {tk.format_bytes(tr.saved_bytes)}") for t in texts)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert HELD in legend and any(t.startswith("#") for t in legend)


def test_a_gpt_block_before_and_after_backward():
    tr = MODELS["gpt"]()
    before = memory_by_step(tr)
    assert before.total[0] == tr.saved_bytes and len(before.bands) == NAMED + 2
    tr.backward()
    observed = memory_by_step(tr)
    assert observed.total[-1] == sum(s.nbytes for s in tr.storages if not s.expired())
    assert len(tr.timeline().axes) == 2


def _alive_by_definition(storages, freed, points):
    """A point k counts a storage freed after step f when k <= f, one nothing frees at every point."""
    return tuple(sum(s.nbytes for s in storages if freed[s] is None or k <= freed[s]) for k in range(points))


def test_each_band_is_its_storages_bytes_alive_point_by_point():
    """The bands summed in one pass equal the definition point by point: an encoder (many storages,
    freed at different steps, some kept) predicted and observed, and a retained graph (nothing freed)."""
    for retain in (None, True):
        tr = MODELS["encoder"]()
        series = [memory_by_step(tr, "predicted")]
        tr.backward(retain_graph=retain)
        series.append(memory_by_step(tr))
        for m in series:
            points = len(m.steps) + 1
            owned = tr.graph_owned_storages()
            ranked = sorted(owned, key=lambda s: -s.nbytes)
            held = [s for s in tr.storages if s not in set(owned)]
            assert m.bands[0].alive == _alive_by_definition(held, m.freed, points)
            assert m.bands[1].alive == _alive_by_definition(ranked[NAMED:], m.freed, points)
            for band, s in zip(reversed(m.bands[2:]), ranked[:NAMED]):
                assert band.alive == _alive_by_definition([s], m.freed, points)
            assert len({f for f in m.freed.values()}) > (1 if retain is None else 0)
        if retain is None:
            assert series[1].total[0] > series[1].total[-1]  # the observed backward freed something
        else:
            assert set(series[1].total) == {tr.saved_bytes}


def test_a_deep_chain_draws_its_timeline():
    """20,000 reverse steps: one pass per band (this took ~45 s when each storage made its own row
    of points and added it to its band's)."""
    v = x = torch.randn(4, requires_grad=True)
    for _ in range(20_000):
        v = v * 1.0001
    tr = tk.trace(v.sum(), progress=False)
    m = memory_by_step(tr)
    assert len(m.total) == len(tr.nodes) + 1 == 20_002 and m.total[0] == tr.saved_bytes
    assert list(m.total) == sorted(m.total, reverse=True)
    del x
