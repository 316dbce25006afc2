"""The training-step memory budget on the default model: every byte named, the peak a moment of
the measured stream, categories that add up to the measurement everywhere."""

import matplotlib
import pytest
import torch

import tracekit as tk
from tracekit.memory_budget import ALLOCATED, CATEGORIES, DEFINITIONS, default_setup

matplotlib.use("Agg")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
F32 = 4


def assert_consistent(b: tk.Budget) -> None:
    """The categories add up to the measured bytes after every allocator event and at every moment;
    the peak is the highest measured point and the timeline holds it with that point's breakdown."""
    assert len(b.live) == len(b.series["parameters"]) > 1
    for i, live in enumerate(b.live):
        assert sum(b.series[c][i] for c in ALLOCATED) == live, i
    for m in b.timeline:
        assert sum(m.bytes[c] for c in ALLOCATED) == m.live == b.live[m.position], m.label
        assert set(m.bytes) == set(CATEGORIES)
    assert b.peak == max(b.live)
    peaks = [m for m in b.timeline if m.peak]
    assert len(peaks) == 1 and peaks[0].label == b.peak_moment
    assert b.live[peaks[0].position] == b.peak and b.live.index(b.peak) == peaks[0].position
    assert b.at_peak == peaks[0].bytes
    positions = [m.position for m in b.timeline]
    assert positions == sorted(positions)
    assert b.naive_sum == sum(max(b.series[c]) for c in ALLOCATED) >= b.peak


@pytest.fixture(scope="module")
def default_cpu() -> tk.Budget:
    return tk.budget()


@pytest.mark.parametrize("device", DEVICES)
def test_a_budget_measured_again_in_the_same_process_names_the_same_bytes(device):
    # a rerun (a student's cell run twice): the allocator hands out the addresses of the first
    # run's tensors again, and a mark's probe must not be taken for an ordinary allocation there
    first, second = tk.budget(device=device), tk.budget(device=device)
    for b in (first, second):
        assert_consistent(b)
    named = [c for c in ALLOCATED if c != "unattributed"]  # on CUDA: what else the process holds
    for label in ("after zero_grad", "after forward", "after backward"):
        assert [second.moment(label).bytes[c] for c in named] == [first.moment(label).bytes[c] for c in named], label


@pytest.mark.parametrize("device", DEVICES)
def test_default_budget_names_every_byte(device, request):
    model, _, (inputs, targets) = default_setup(device)
    params = sum(p.numel() * F32 for p in model.parameters())
    b = request.getfixturevalue("default_cpu") if device == "cpu" else tk.budget(device=device)
    assert_consistent(b)
    start, zeroed, fwd, bwd, end = (b.moment(x) for x in ("start", "after zero_grad", "after forward",
                                                            "after backward", "end"))
    if device == "cpu":  # CUDA rounds every block up to 512 bytes
        assert params == 1_597_480
        batch = inputs.numel() * F32 + targets.numel() * 8
        assert start.bytes["parameters"] == params
        assert start.bytes["gradients"] == params  # left by the previous (warm-up) step
        assert start.bytes["optimizer state"] == 2 * params + 6 * F32  # Adam: exp_avg, exp_avg_sq, step
        assert start.bytes["application references"] == batch
        # saved: two GELU inputs and outputs (512×512), log_softmax's output (512×10), nll's total_weight
        assert fwd.bytes["saved activations"] == 4 * 512 * 512 * F32 + 512 * 10 * F32 + F32
        assert fwd.bytes["application references"] == batch + F32  # + the loss the step holds
        # the peak: inside the last Linear's reverse rule, with the activations still saved, that
        # layer's gradients made, and d(logits) and d(hidden) in flight
        assert b.at_peak["saved activations"] == 4 * 512 * 512 * F32
        assert b.at_peak["gradients"] == (512 * 10 + 10) * F32
        assert b.at_peak["temporary workspaces"] == 512 * 512 * F32 + 512 * 10 * F32 + F32
        assert b.at_peak["unattributed"] == 0
        assert b.peak == params + (512 * 10 + 10) * F32 + 2 * params + 6 * F32 + 4 * 512 * 512 * F32 + batch + F32 \
            + 512 * 512 * F32 + 512 * 10 * F32 + F32
    assert zeroed.bytes["gradients"] == 0  # zero_grad(set_to_none=True)
    assert fwd.bytes["gradients"] == 0 and end.bytes["gradients"] == start.bytes["gradients"]
    assert start.bytes["saved activations"] == end.bytes["saved activations"] == bwd.bytes["saved activations"] == 0
    assert b.peak_moment.startswith("peak, in backward ") and "AddmmBackward0" in b.peak_moment
    peak = b.moment(b.peak_moment)
    assert fwd.position < peak.position < bwd.position
    assert b.naive_sum > b.peak  # the categories peak at different moments
    assert list(b.at_peak) == list(CATEGORIES)


def test_budget_text_html_and_figure(default_cpu):
    b = default_cpu
    text = b.text()
    assert "naive sum of each category's own peak" in text
    for c in CATEGORIES:
        assert f"  {c}: " in text  # each category defined in the table's header notes
    assert DEFINITIONS["temporary workspaces"] in text
    html = b._repr_html_()
    assert "<table>" in html and "<li><b>application references</b>" in html
    fig = b.figure()
    ax = fig.axes[0]
    assert len(ax.collections) >= len(ALLOCATED)  # one stacked band per category
    scale = 1 << 20
    peak = b.moment(b.peak_moment)
    markers = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert [(x, y) for x, y in zip(*markers[0].get_data())] == [(peak.position, b.peak / scale)]
    measured = next(ln for ln in ax.lines if ln.get_label() == "measured allocated")
    assert max(measured.get_ydata()) == pytest.approx(b.peak / scale)  # the curve reaches the peak marker
    assert any(f"peak {b.peak / scale:.2f} MiB" in t.get_text() for t in ax.texts)


def test_budget_rejects_unknown_device():
    with pytest.raises(tk.DeviceUnavailableError):
        tk.budget(device="mps")
