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


# Third-party models (issue 38), built from small configs (nothing downloaded). Each builder returns
# (model, a function running the forward to a scalar loss); the packages are imported when called:
# `pytest.importorskip` in tests/test_third_party_models.py says which is missing.

def _hf(name: str):
    import transformers

    transformers.logging.set_verbosity_error()
    return getattr(transformers, name)


def _ids(batch: int, length: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(1))


def gpt2(checkpointing: bool = False):
    """transformers' GPT2LMHeadModel, 2 layers of width 32 (optionally with gradient checkpointing)."""
    config = _hf("GPT2Config")(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                               bos_token_id=0, eos_token_id=0)
    model = _hf("GPT2LMHeadModel")(config).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = _ids(2, 8, 64)
    return model, lambda: model(input_ids=ids, labels=ids).loss


def bert():
    """BertForSequenceClassification (its CrossEntropyLoss is made inside forward)."""
    config = _hf("BertConfig")(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                               vocab_size=64, max_position_embeddings=16, num_labels=3)
    model = _hf("BertForSequenceClassification")(config).train()
    ids, labels = _ids(2, 8, 64), torch.tensor([0, 2])
    return model, lambda: model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss


def llama():
    """LlamaForCausalLM: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention."""
    config = _hf("LlamaConfig")(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                intermediate_size=64, vocab_size=64, max_position_embeddings=16)
    model = _hf("LlamaForCausalLM")(config).train()
    ids = _ids(2, 8, 64)
    return model, lambda: model(input_ids=ids, labels=ids).loss


def t5():
    """T5ForConditionalGeneration: encoder, decoder, relative position bias."""
    config = _hf("T5Config")(num_layers=1, num_decoder_layers=1, d_model=32, d_kv=8, num_heads=2, d_ff=64,
                             vocab_size=64, decoder_start_token_id=0)
    model = _hf("T5ForConditionalGeneration")(config).train()
    ids, labels = _ids(2, 8, 64), _ids(2, 6, 64)
    return model, lambda: model(input_ids=ids, labels=labels).loss


def vit():
    """ViTForImageClassification on 16x16 images in 4x4 patches."""
    config = _hf("ViTConfig")(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=64, num_labels=5)
    model = _hf("ViTForImageClassification")(config).train()
    pixels, labels = torch.randn(2, 3, 16, 16), torch.tensor([1, 4])
    return model, lambda: model(pixel_values=pixels, labels=labels).loss


def packed_rnn():
    """A packed bidirectional LSTM, then a GRU, over sequences of lengths 5 and 3."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    model = nn.ModuleDict({"lstm": nn.LSTM(8, 16, batch_first=True, bidirectional=True),
                           "gru": nn.GRU(32, 16, batch_first=True)})
    x, lengths = torch.randn(2, 5, 8), torch.tensor([5, 3])

    def run() -> torch.Tensor:
        out, _ = model["lstm"](pack_padded_sequence(x, lengths, batch_first=True))
        padded, _ = pad_packed_sequence(out, batch_first=True)
        h, _ = model["gru"](padded)
        return h.pow(2).mean()
    return model, run


def resnet18():
    """torchvision's resnet18 on two 32x32 images."""
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).train()
    x, labels = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    return model, lambda: nn.functional.cross_entropy(model(x), labels)


def mobilenet():
    """torchvision's mobilenet_v3_small (hardswish, squeeze-excitation)."""
    import torchvision

    model = torchvision.models.mobilenet_v3_small(num_classes=10).train()
    x, labels = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    return model, lambda: nn.functional.cross_entropy(model(x), labels)


def convnext():
    """timm's convnext_atto (LayerNorm2d, depthwise convolutions, layer scale)."""
    import timm

    model = timm.create_model("convnext_atto", pretrained=False, num_classes=10).train()
    x, labels = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    return model, lambda: nn.functional.cross_entropy(model(x), labels)


class _Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)) + x)


def compiled_resnet():
    """A resnet18-like stack (stem, residual blocks with BatchNorm, pooled head) under
    torch.compile(backend="aot_eager"): its backward is one CompiledFunctionBackward node."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), _Block(8), _Block(8),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).train()
    compiled = torch.compile(model, backend="aot_eager")
    x, labels = torch.randn(2, 3, 16, 16), torch.tensor([3, 7])
    return model, lambda: nn.functional.cross_entropy(compiled(x), labels)


def gpt2_bf16():
    """GPT-2 under torch.autocast("cpu", dtype=torch.bfloat16): matmuls in bfloat16, norms in float32."""
    model, run = gpt2()

    def autocast_run() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return run()
    return model, autocast_run


THIRD_PARTY: dict[str, tuple[tuple[str, ...], Callable[[], tuple[nn.Module, Callable[[], torch.Tensor]]]]] = {
    # name: (the packages it needs, its builder)
    "gpt2": (("transformers",), gpt2),
    "gpt2_checkpointing": (("transformers",), lambda: gpt2(checkpointing=True)),
    "gpt2_bf16": (("transformers",), gpt2_bf16),
    "bert": (("transformers",), bert),
    "llama": (("transformers",), llama),
    "t5": (("transformers",), t5),
    "vit": (("transformers",), vit),
    "packed_rnn": ((), packed_rnn),
    "compiled_resnet": ((), compiled_resnet),
    "resnet18": (("torchvision",), resnet18),
    "mobilenet": (("torchvision",), mobilenet),
    "convnext": (("timm",), convnext),
}
