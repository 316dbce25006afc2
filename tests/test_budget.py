"""The training-step memory budget: categories, peak from overlapping lifetimes, naive sum."""

import matplotlib
import pytest
import torch

import tracekit as tk
from tracekit.memory_budget import CATEGORIES, default_setup

matplotlib.use("Agg")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", DEVICES)
def test_default_budget_categories_and_peak(device):
    model, _, _ = default_setup(device)
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    b = tk.budget(device=device)
    at = {m.label: m for m in b.timeline}
    start, fwd, end = at["start"], at["after forward"], at["end"]
    if device == "cpu":  # CUDA rounds every block up to 512 bytes
        assert start.bytes["parameters"] == param_bytes == 1_597_480
        assert start.bytes["optimizer state"] == 2 * param_bytes + 6 * 4  # Adam: exp_avg, exp_avg_sq, step
        assert end.bytes["gradients"] == param_bytes
        # two GELU inputs and two GELU outputs (the next Linear's input), 512×512 float32 each
        assert fwd.bytes["saved activations"] == 4 * 512 * 512 * 4
        # the measurement agrees with the trace: forward added the activations, the output and the loss
        assert fwd.live - start.live == 4 * 512 * 512 * 4 + 512 * 10 * 4 + 4
    assert start.bytes["gradients"] == 0 and start.bytes["saved activations"] == 0
    assert end.bytes["saved activations"] == 0
    assert b.peak >= max(m.live for m in b.timeline)
    assert b.peak_moment.startswith("backward step")
    assert sum(v for k, v in b.at_peak.items() if k != "allocator reserve") == b.peak
    assert b.naive_sum > b.peak  # categories peak at different moments
    assert list(b.at_peak) == list(CATEGORIES)
    text = b.text()
    assert "naive sum of each category's own peak" in text and "temporary workspaces" in text
    fig = b.figure()
    assert len(fig.axes[0].collections) >= len(CATEGORIES)


def test_budget_with_a_custom_model_and_sgd():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # no optimizer state
    batch = torch.randn(128, 64)
    b = tk.budget(model, opt, batch, loss_fn=lambda out: out.abs().mean())
    at = {m.label: m for m in b.timeline}
    assert at["start"].bytes["optimizer state"] == 0
    assert at["after forward"].bytes["saved activations"] > 0
    assert "<table>" in b._repr_html_()


def test_budget_rejects_unknown_device():
    with pytest.raises(tk.DeviceUnavailableError):
        tk.budget(device="meta")
