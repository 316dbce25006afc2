"""Four small real models as a practitioner writes them, and tracekit's transformer blocks,
each captured once: an MLP with LayerNorm, nn.TransformerEncoderLayer(64, 4), a two-block CNN
(Conv2d, BatchNorm2d, ReLU, MaxPool2d) and a two-step nn.LSTM (issue 30)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import tracekit as tk


def _capture(model: nn.Module, x: torch.Tensor, loss: Callable[[torch.Tensor], torch.Tensor]) -> tk.Trace:
    with tk.capture() as cap:
        out = model(x)
        value = loss(out[0] if isinstance(out, tuple) else out)
    tr = cap.trace(value)
    tr.loss = value  # a trace holds its outputs weakly (live.py): keep the loss alive, as a user's variable would
    return tr


def mlp() -> tk.Trace:
    """Linear, LayerNorm, GELU, Linear, then logsumexp."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 10))
    return _capture(model, torch.randn(8, 32), lambda y: y.logsumexp(-1).mean())


def encoder() -> tk.Trace:
    """nn.TransformerEncoderLayer(64, 4) on a (2, 10, 64) batch."""
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    return _capture(model, torch.randn(2, 10, 64), lambda y: y.pow(2).mean())


def cnn() -> tk.Trace:
    """Two blocks of Conv2d, BatchNorm2d, ReLU, MaxPool2d; a Linear head; cross-entropy."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    labels = torch.tensor([0, 1, 2, 3])
    return _capture(model, torch.randn(4, 3, 16, 16), lambda y: nn.functional.cross_entropy(y, labels))


def lstm() -> tk.Trace:
    """nn.LSTM(16, 32) over two time steps."""
    torch.manual_seed(0)
    model = nn.LSTM(16, 32, batch_first=True)
    return _capture(model, torch.randn(4, 2, 16), lambda y: y.sum())


def gpt() -> tk.Trace:
    """tk.transformer.GPTBlock(64, 4) with dropout."""
    torch.manual_seed(0)
    return _capture(tk.transformer.GPTBlock(64, 4), torch.randn(2, 8, 64, requires_grad=True), lambda y: y.sum())


def llama() -> tk.Trace:
    """tk.transformer.LlamaBlock(64, 4)."""
    torch.manual_seed(0)
    return _capture(tk.transformer.LlamaBlock(64, 4), torch.randn(2, 8, 64, requires_grad=True), lambda y: y.sum())


MODELS: dict[str, Callable[[], tk.Trace]] = {
    "mlp": mlp, "encoder": encoder, "cnn": cnn, "lstm": lstm, "gpt": gpt, "llama": llama,
}
