"""Meta and fake tensors: the same residuals and bytes as on CPU, notes where the kernel differs,
no observed backward (a clear error) but predicted free points equal to the observed ones."""

import io

import pytest
import torch
import torch.nn.functional as F
from test_capture import GRAPHS
from torch import nn
from torch._subclasses import FakeTensorMode

import tracekit as tk
from tracekit.progress import Progress
from tracekit.transformer import GPTBlock, LlamaBlock
from tracekit.without_data import RNN_NOTE, RNN_WORKSPACE_NOTE, SDPA_NOTE

MODELS = {
    "encoder layer": (lambda: nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), (2, 8, 32)),
    "conv net": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                       nn.Flatten(), nn.Linear(8 * 3 * 3, 4)), (2, 3, 8, 8)),
    "mlp": (lambda: nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 16),
                                  nn.LayerNorm(16)), (4, 16)),
    "gpt block (attention written out)": (lambda: GPTBlock(32, 4), (2, 16, 32)),
    "gpt block without dropout": (lambda: GPTBlock(16, 2, dropout=0.0), (1, 8, 16)),
}


def _where(device: str):
    return FakeTensorMode() if device == "fake" else torch.device(device)


def signature(tr):
    """What must agree between backends: residuals, bytes, and how residuals share storages."""
    residuals = tr.residuals
    index = {r: i for i, r in enumerate(residuals)}
    groups = sorted(sorted(index[r] for r in s.residuals) for s in tr.storages)
    return ([(r.node.name, r.slot, r.shape, r.dtype, r.nbytes, r.pinned_nbytes) for r in residuals],
            tr.saved_bytes, tr.visible_bytes, groups)


def _model_trace(name, device):
    torch.manual_seed(0)
    make, shape = MODELS[name]
    with _where(device):
        model = make()
        x = torch.randn(*shape, requires_grad=True)
        y = model(x).sum()
    return tk.trace(y), y  # the trace holds y weakly: keep it to run backward


@pytest.mark.parametrize("name", sorted(MODELS))
def test_meta_and_fake_traces_equal_the_cpu_trace(name):
    cpu, _ = _model_trace(name, "cpu")
    assert cpu.without_data is None and len(cpu.storages) > 3
    for device in ("meta", "fake"):
        other, _ = _model_trace(name, device)
        assert other.without_data == device
        assert signature(other) == signature(cpu), device
        # nodes that save nothing may differ (meta: ViewBackward0 where cpu has ReshapeAliasBackward0)
        assert len(other.nodes) == len(cpu.nodes)
        noted = {n.note for n in other.nodes if n.note}
        # the encoder layer calls scaled_dot_product_attention: meta says a device may pick another kernel
        assert noted == ({SDPA_NOTE} if name == "encoder layer" and device == "meta" else set())


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_small_graphs_trace_the_same_on_meta(name):
    def run(device):
        torch.manual_seed(0)
        with torch.device(device):
            a = torch.randn(4, 4, requires_grad=True)
            w = torch.randn(4, 4, requires_grad=True)
            return tk.trace(GRAPHS[name](a, w))
    assert signature(run("meta")) == signature(run("cpu"))


def test_the_issue_example_no_longer_collapses_into_one_storage():
    def run(device):
        torch.manual_seed(0)
        with torch.device(device):
            layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
            return tk.trace(layer(torch.randn(4, 128, 512)).sum())
    meta, cpu = run("meta"), run("cpu")
    assert len(meta.storages) == len(cpu.storages) > 20
    assert meta.saved_bytes == cpu.saved_bytes > 30 * 2**20
    assert "meta tensors: predicted from shapes" in meta.summary()


def test_views_of_one_meta_storage_count_once():
    for device in ("meta", "fake"):
        with _where(device):
            a = torch.randn(8, 8, requires_grad=True)
            h = a * 2  # 256 bytes
            y = (h[:4] * h[4:]).sum() + h.t().exp().sum()
        tr = tk.trace(y)
        shared = [s for s in tr.storages if len(s.residuals) == 2]
        assert len(shared) == 1 and shared[0].nbytes == 256
        assert {r.shape for r in shared[0].residuals} == {(4, 8)}
        assert tr.saved_bytes == 256 + 256 + 8 and tr.visible_bytes == 128 + 128 + 256 + 8


def _sdpa_trace(device, dropout=0.0):
    with _where(device):
        q = torch.randn(2, 4, 16, 8, requires_grad=True)
        with tk.capture() as cap:
            out = F.scaled_dot_product_attention(q * 1, q * 2, q * 3, is_causal=True, dropout_p=dropout)
        return cap.trace(out.sum())


def test_meta_takes_the_math_path_of_sdpa_and_says_so():
    cpu, meta, fake = _sdpa_trace("cpu"), _sdpa_trace("meta"), _sdpa_trace("fake")
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in [n.name for n in cpu.nodes]
    names = [n.name for n in meta.nodes]
    assert "SafeSoftmaxBackward0" in names and "ScaledDotProductFlashAttentionForCpuBackward0" not in names
    noted = [n for n in meta.nodes if n.note]
    assert noted and all(n.note == SDPA_NOTE for n in noted)
    assert {n.call for n in noted} == {"scaled_dot_product_attention"}
    assert " ".join(SDPA_NOTE.split()) in " ".join(meta.text().split()) and "flash" in SDPA_NOTE  # wrapped at 100
    # the math path keeps the s×s attention matrix: more bytes than flash on this input
    assert meta.saved_bytes > cpu.saved_bytes
    # fake tensors on the cpu device make cpu's choice: the same trace as the real cpu
    assert signature(fake) == signature(cpu) and all(n.note is None for n in fake.nodes)
    # with dropout cpu takes the math path too (the note says "may")
    assert "SafeSoftmaxBackward0" in [n.name for n in _sdpa_trace("cpu", dropout=0.1).nodes]


def test_sdpa_note_without_capture_comes_from_the_softmax_node():
    with torch.device("meta"):
        q = torch.randn(1, 2, 8, 4, requires_grad=True)
        tr = tk.trace(F.scaled_dot_product_attention(q, q, q).sum())
    assert [n.name for n in tr.nodes if n.note] == ["SafeSoftmaxBackward0"]


def test_recurrent_layers_differ_on_meta_and_are_noted():
    def run(device):
        torch.manual_seed(0)
        with _where(device):
            lstm = nn.LSTM(8, 16, batch_first=True)
            x = torch.randn(2, 5, 8, requires_grad=True)
            with tk.capture() as cap:
                y = lstm(x)[0].sum()
        return cap.trace(y)
    cpu, meta, fake = run("cpu"), run("meta"), run("fake")
    if "MkldnnRnnLayerBackward0" not in [n.name for n in cpu.nodes]:
        pytest.skip("this PyTorch build runs LSTM without oneDNN on cpu")
    assert len(meta.nodes) > 10 * len(cpu.nodes) // 5  # one cell per time step
    assert {n.note for n in meta.nodes if n.call == "lstm"} == {RNN_NOTE}
    # fake cpu picks oneDNN too, but cannot size its workspace
    (rnn,) = [n for n in fake.nodes if n.name == "MkldnnRnnLayerBackward0"]
    assert rnn.note == RNN_WORKSPACE_NOTE
    workspace = [r for r in rnn.residuals if r.nbytes == 0]
    assert workspace and fake.saved_bytes < cpu.saved_bytes


def test_observing_backward_on_meta_or_fake_is_refused_clearly():
    for device in ("meta", "fake"):
        tr, _ = _model_trace("mlp", device)
        with pytest.raises(tk.NotObservableError, match="predict_backward") as err:
            tr.backward()
        assert isinstance(err.value, tk.TracekitError) and device in str(err.value)
        assert tr.steps == [] and "not observable" in tr.text()


@pytest.mark.parametrize("name", ["encoder layer", "gpt block (attention written out)", "mlp"])
def test_predicted_free_points_equal_the_observed_ones_on_cpu(name):
    cpu, y = _model_trace(name, "cpu")
    predicted = cpu.predict_backward()
    meta = _model_trace(name, "meta")[0].predict_backward()
    cpu.backward()
    assert [s.node.index for s in predicted.steps] == [s.node.index for s in cpu.steps]
    assert [s.node.index for s in meta.steps] == [s.node.index for s in cpu.steps]
    for r in cpu.residuals:
        assert predicted.released_at[r] == r.released_at
    for s in cpu.storages:
        assert predicted.freed_at.get(s) == s.residuals[0].freed_at
    freed = [s for s in cpu.storages if s.residuals[0].freed_at is not None]
    assert freed  # the comparison covered storages that really went away
    text = meta.text()
    assert "predicted" in text and "freed after step" in text and "(predicted)" in meta.free_point(
        meta.trace.residuals[0])


def test_predicted_order_with_two_outputs_and_retain_graph():
    a = torch.randn(6, requires_grad=True)
    b = a.exp()
    c = (b * a).sin().sum()
    d = b.cos().sum()
    tr = tk.trace(c, d)
    predicted = tr.predict_backward()
    kept = tr.predict_backward(retain_graph=True)
    assert all("retained graph" in kept.free_point(r) for r in tr.residuals)
    tr.backward()
    assert [s.node.index for s in predicted.steps] == [s.node.index for s in tr.steps]


def test_llama_block_traces_on_meta_with_a_note_and_on_fake_cpu_with_flash():
    def run(device):
        with _where(device):
            block = LlamaBlock(hidden=64, heads=4, ffn=128, dtype=torch.bfloat16)
            x = torch.randn(1, 32, 64, dtype=torch.bfloat16, requires_grad=True)
            return tk.trace(block(x).sum())
    meta, fake, cpu = run("meta"), run("fake"), run("cpu")
    assert any(n.note == SDPA_NOTE for n in meta.nodes)
    assert signature(fake) == signature(cpu)
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in [n.name for n in fake.nodes]


def test_progress_bar_draws_only_when_asked_or_slow():
    a = torch.randn(3, requires_grad=True)
    y = a
    for _ in range(50):
        y = y.sin()
    err = io.StringIO()
    bar = Progress(50, "tracing nodes", True, stream=err)
    for i in range(50):
        bar.update(i)
    bar.close()
    assert err.getvalue().rstrip().endswith("50/50 (0.0 s)") and "[####" in err.getvalue()
    quiet = io.StringIO()
    bar = Progress(50, "tracing nodes", None, stream=quiet)  # auto: a fast trace draws nothing
    bar.update(10)
    bar.close()
    assert quiet.getvalue() == ""


def test_trace_progress_argument_writes_to_stderr(capsys):
    a = torch.randn(3, requires_grad=True)
    y = a.sin().cos().sum()
    tk.trace(y, progress=True)
    assert "tracing nodes [" in capsys.readouterr().err
    tk.trace(y)
    assert capsys.readouterr().err == ""


def test_16_bit_layer_norm_statistics_are_wider_on_meta_and_noted():
    def run(device):
        with _where(device):
            x = torch.randn(2, 8, 16, dtype=torch.bfloat16, requires_grad=True)
            return tk.trace(F.layer_norm(x, (16,)).sum())
    cpu, meta, fake = run("cpu"), run("meta"), run("fake")
    assert [r.dtype for r in cpu.residuals] == ["bfloat16"] * 3
    assert [r.dtype for r in meta.residuals] == ["bfloat16", "float32", "float32"]
    assert meta.nodes[0].note == tk.without_data.LAYER_NORM_NOTE and cpu.nodes[0].note is None
    assert signature(fake) == signature(cpu) and fake.nodes[0].note is None
