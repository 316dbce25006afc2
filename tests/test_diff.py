"""tk.diff between schedules of one program: eager, checkpoint, selective checkpoint, torch.compile."""

import functools

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import tracekit as tk
from tracekit.diff import DiffError

N, D = 64, 128
ACT = N * D * 4  # one float32 activation: 32 KiB


def block(h, w):
    return torch.tanh(h @ w)


def segment(h, w1, w2):
    return block(block(h, w1), w2)


def save_mm(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


def program(x, ws, schedule):
    """Block 0 always eager; blocks 1-2 eager, checkpointed, selectively checkpointed."""
    h = block(x, ws[0])
    if schedule == "eager":
        h = segment(h, ws[1], ws[2])
    elif schedule == "checkpoint":
        h = checkpoint(segment, h, ws[1], ws[2], use_reentrant=False)
    elif schedule == "selective":
        ctx = functools.partial(create_selective_checkpoint_contexts, save_mm)
        h = checkpoint(segment, h, ws[1], ws[2], use_reentrant=False, context_fn=ctx)
    return h.pow(2).mean()


@pytest.fixture
def inputs():
    x = torch.randn(N, D)
    ws = [torch.randn(D, D, requires_grad=True) / D**0.5 for _ in range(3)]
    return x, [w.detach().requires_grad_() for w in ws]


KEPT = []  # the traced outputs: a trace holds its output weakly, and measure=True runs backward


def traced(x, ws, schedule):
    y = program(x, ws, schedule)
    KEPT.append(y)
    return tk.trace(y)


def test_eager_vs_checkpoint(inputs):
    x, ws = inputs
    d = tk.diff(traced(x, ws, "eager"), traced(x, ws, "checkpoint"), names=("eager", "checkpoint"))
    assert d.held_a == 4 * ACT  # x, tanh0, tanh1, tanh2 (pow reads tanh2)
    assert d.held_b == 3 * ACT  # x, tanh0 (the checkpoint's input), tanh2 (outside the checkpoint)
    # the segment's residuals: eager keeps them, checkpoint recomputes them (#2 reads tanh0, whose
    # storage checkpoint still holds as its input: the bytes are counted once, under "both")
    assert {r.what for r in d.only_a} == {"#2 MmBackward0.self", "#3 TanhBackward0.result",
                                         "#4 MmBackward0.self", "#5 TanhBackward0.result"}
    assert all(r.b == "recomputed" for r in d.only_a)
    # what the checkpoint keeps to rerun its segment (issue 38): tanh0, the segment's input, a row of its own
    assert [(r.what, r.b, r.nbytes) for r in d.only_b] == [
        ("#2 MmBackward0.checkpoint args[0]", "kept (kept by checkpoint to recompute)", ACT)]
    both = {r.what.split(" ", 1)[1] for r in d.both}
    assert {"MmBackward0.self", "TanhBackward0.result", "PowBackward0.self"} <= both
    assert d.cache_a == d.cache_b == []
    text = d.text()
    assert "kept only by eager: 4, only by checkpoint: 1" in text and "held after forward: eager 128.0 KiB" in text


def test_eager_vs_selective_checkpoint_counts_the_policy_cache(inputs):
    x, ws = inputs
    d = tk.diff(traced(x, ws, "eager"), traced(x, ws, "selective"), names=("eager", "sac"))
    assert [(c.op, c.shape, c.nbytes) for c in d.cache_b] == [("aten.mm.default", (N, D), ACT)] * 2
    assert d.held_b == 3 * ACT + 2 * ACT  # the checkpoint's in/outputs + two cached mm outputs
    rows = str(d.table())
    assert rows.count("kept (SAC cache)") == 2 and "only sac" in rows
    full = tk.diff(traced(x, ws, "checkpoint"), traced(x, ws, "selective"), names=("checkpoint", "sac"))
    assert full.held_b - full.held_a == 2 * ACT and full.only_a == [] and full.only_b == []


def test_measured_peaks(inputs):
    x, ws = inputs
    d = tk.diff(traced(x, ws, "eager"), traced(x, ws, "checkpoint"), names=("eager", "checkpoint"), measure=True)
    assert d.peak_a >= d.held_a and d.peak_b >= d.held_b
    assert "peak (measured): eager" in d.summary()
    with pytest.raises(DiffError, match="already ran"):
        tk.diff(d.a, d.b, measure=True)


def test_two_column_drawing(inputs):
    x, ws = inputs
    d = tk.diff(traced(x, ws, "eager"), traced(x, ws, "selective"), names=("eager", "sac"))
    dot = d.draw().source
    assert "cluster_a" in dot and "cluster_b" in dot and 'label="eager: 128.0 KiB"' in dot
    assert dot.count("arrowhead=none") == len(d.both) > 0
    assert dot.count("(SAC cache)") == 2
    assert "<svg" in d.svg()
    assert "<table>" in d._repr_html_()


def test_bad_input():
    with pytest.raises(tk.TracekitError, match="compares two traces"):
        tk.diff(3, 4)


@pytest.mark.slow
def test_eager_vs_torch_compile(inputs):
    x, ws = inputs
    compiled = torch.compile(lambda x, *ws: program(x, ws, "eager"), backend="aot_eager_decomp_partition")
    d = tk.diff(traced(x, ws, "eager"), tk.trace(compiled(x, *ws)), names=("eager", "compile"))
    assert d.only_b and all("CompiledFunctionBackward" in r.what for r in d.only_b)
    assert d.held_b > 0 and d.held_a == 4 * ACT
    assert all(r.b == "-" for r in d.only_a)


class _Exp(torch.autograd.Function):
    """exp as a custom Function: it saves its own output."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(result := x.exp())
        return result

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.saved_tensors[0]


def test_the_policy_cache_is_found_through_a_custom_function_alone():
    """Only the custom Function saves a tensor in the region (add saves nothing): the cache is still found."""
    def save_add(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.add.Tensor else CheckpointPolicy.PREFER_RECOMPUTE

    x = torch.randn(N, D, requires_grad=True)
    ctx = functools.partial(create_selective_checkpoint_contexts, save_add)
    out = checkpoint(lambda h: _Exp.apply(torch.add(h, 1)), x, use_reentrant=False, context_fn=ctx)
    cache = tk.checkpoint_cache(tk.trace(out.sum()))
    assert [(c.op, c.shape, c.nbytes) for c in cache] == [("aten.add.Tensor", (N, D), ACT)]
