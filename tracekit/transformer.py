"""Two transformer layers written out op by op, for tracing at any size (on meta for big ones).

`GPTBlock` is built like the layer of Korthikanti et al. ("Reducing Activation Recomputation
in Large Transformer Models"): LayerNorm, QKV projection, attention as bmm / softmax / dropout
/ bmm, output projection, dropout, residual; LayerNorm, MLP (h → 4h, GeLU, 4h → h), dropout,
residual. `LlamaBlock` is a Llama-style decoder layer: RMSNorm, rotary embeddings,
scaled_dot_product_attention (causal), SwiGLU MLP, no biases, no dropout.

`forward(x, marks=dict)` also fills `marks` with the tensors the paper's terms are made of
(see tracekit.formula), so a table can be computed from the trace rather than typed.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# a term is: a tensor's storage (VALUE), what the node that made a tensor saved (SAVED_BY), or
# one slot the node that made a tensor saved (SLOT_OF, with the slot name)
VALUE, SAVED_BY, SLOT_OF = "value", "saved by", "slot of"


class GPTBlock(nn.Module):
    """A GPT layer as in Megatron-LM / Korthikanti et al., attention written out (no fused kernels)."""

    def __init__(self, hidden: int, heads: int, dropout: float = 0.1, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden, self.heads, self.p = hidden, heads, dropout
        self.ln1 = nn.LayerNorm(hidden, dtype=dtype)
        self.qkv = nn.Linear(hidden, 3 * hidden, dtype=dtype)
        self.proj = nn.Linear(hidden, hidden, dtype=dtype)
        self.ln2 = nn.LayerNorm(hidden, dtype=dtype)
        self.fc1 = nn.Linear(hidden, 4 * hidden, dtype=dtype)
        self.fc2 = nn.Linear(4 * hidden, hidden, dtype=dtype)

    def forward(self, x: torch.Tensor, marks: dict[str, tuple[Any, ...]] | None = None) -> torch.Tensor:
        """x: (batch, sequence, hidden) -> the same shape."""
        b, s, h = x.shape
        a, d = self.heads, h // self.heads
        drop = self.p > 0 and self.training
        ln1 = self.ln1(x)
        q, k, v = self.qkv(ln1).split(h, dim=-1)
        q, k, v = (t.reshape(b, s, a, d).transpose(1, 2).reshape(b * a, s, d) for t in (q, k, v))
        qk = torch.bmm(q, k.transpose(1, 2))
        scores = qk * (1.0 / math.sqrt(d))
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        dropped = F.dropout(probs, self.p, self.training)
        weighted = torch.bmm(dropped, v)
        ctx = weighted.reshape(b, a, s, d).transpose(1, 2).reshape(b, s, h)
        attn = F.dropout(self.proj(ctx), self.p, self.training)
        h1 = x + attn
        ln2 = self.ln2(h1)
        f1 = self.fc1(ln2)
        g = F.gelu(f1)
        mlp = F.dropout(self.fc2(g), self.p, self.training)
        if marks is not None:
            marks.update({
                "LayerNorm 1 input": (VALUE, x), "QKV linear input": (VALUE, ln1),
                "Q (for QKᵀ)": (SLOT_OF, qk, "self"), "K (for QKᵀ)": (SLOT_OF, qk, "mat2"),
                "softmax output": (VALUE, probs),
                "dropout output (for ·V)": (SLOT_OF, weighted, "self"), "V": (SLOT_OF, weighted, "mat2"),
                "projection input": (VALUE, ctx), "LayerNorm 2 input": (VALUE, h1),
                "MLP fc1 input": (VALUE, ln2), "GeLU input": (VALUE, f1), "MLP fc2 input": (VALUE, g),
            })
            if drop:
                marks.update({"softmax dropout mask": (SAVED_BY, dropped), "projection dropout mask": (SAVED_BY, attn),
                              "MLP dropout mask": (SAVED_BY, mlp)})
        return h1 + mlp


class RMSNorm(nn.Module):
    """Llama's RMSNorm as in its reference code: normalise in float32, scale by a weight."""

    def __init__(self, hidden: int, eps: float = 1e-5, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x / rms(x) · weight."""
        f = x.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class LlamaBlock(nn.Module):
    """A Llama-style decoder layer: RMSNorm, rotary embeddings, causal SDPA, SwiGLU; no biases."""

    def __init__(self, hidden: int = 4096, heads: int = 32, ffn: int = 11008, eps: float = 1e-5,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.norm1 = RMSNorm(hidden, eps, dtype)
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False, dtype=dtype) for _ in range(4))
        self.norm2 = RMSNorm(hidden, eps, dtype)
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=dtype)

    def _rope(self, t: torch.Tensor) -> torch.Tensor:
        """Rotary position embedding on (batch, heads, sequence, head_dim)."""
        s, d = t.shape[-2], t.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=t.device, dtype=torch.float32) / d))
        angles = torch.outer(torch.arange(s, device=t.device, dtype=torch.float32), inv)
        cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(t.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(t.dtype)
        half = d // 2
        rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * cos + rotated * sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, sequence, hidden) -> the same shape."""
        b, s, h = x.shape
        a, d = self.heads, h // self.heads
        n1 = self.norm1(x)
        q, k, v = (proj(n1).reshape(b, s, a, d).transpose(1, 2) for proj in (self.q, self.k, self.v))
        att = F.scaled_dot_product_attention(self._rope(q), self._rope(k), v, is_causal=True)
        h1 = x + self.o(att.transpose(1, 2).reshape(b, s, h))
        n2 = self.norm2(h1)
        return h1 + self.down(F.silu(self.gate(n2)) * self.up(n2))


def stack(block: type[nn.Module], layers: int, **kwargs: Any) -> nn.Sequential:
    """`layers` copies of a block in a row (build it under `torch.device('meta')` for big sizes)."""
    return nn.Sequential(*(block(**kwargs) for _ in range(layers)))
