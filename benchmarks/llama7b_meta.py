"""Trace a Llama-7B-shaped decoder layer (h=4096, 32 heads, s=4096, b=1, bf16) without memory.

    python benchmarks/llama7b_meta.py

Prints the time and the saved activation bytes (parameters excluded) of one layer on meta
(scaled_dot_product_attention's math path), of one layer under FakeTensorMode on cpu (the
kernel cpu picks: flash attention), and of the whole 32-layer stack on meta.
"""

from __future__ import annotations

import time

import torch
from torch._subclasses import FakeTensorMode

import tracekit as tk
from tracekit.storage import storage_key
from tracekit.transformer import LlamaBlock, stack

H, HEADS, FFN, S, B, LAYERS = 4096, 32, 11008, 4096, 1, 32


def activations(trace: tk.Trace, model: torch.nn.Module) -> int:
    """Bytes of the storages the trace's residuals pin, parameters excluded."""
    params = {storage_key(p) for p in model.parameters()}
    return sum(s.nbytes for s in trace.storages if s.key not in params)


def run(where: object, layers: int) -> tuple[float, tk.Trace, int]:
    """(seconds to build, forward and trace, the trace, activation bytes)."""
    t0 = time.perf_counter()
    with where:  # type: ignore[attr-defined]
        model = stack(LlamaBlock, layers, hidden=H, heads=HEADS, ffn=FFN, dtype=torch.bfloat16)
        x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
        y = model(x)
    tr = tk.trace(y, progress=layers > 1)
    return time.perf_counter() - t0, tr, activations(tr, model)


def main() -> None:
    """Measure and print."""
    t0 = time.perf_counter()
    torch.ones(2, device="meta").pow(2)  # PyTorch imports its meta implementations on first use
    print(f"first meta op in this process (PyTorch's one-time import): {time.perf_counter() - t0:.1f} s")
    seconds, tr, act = run(torch.device("meta"), 1)
    gib = 1 << 30
    print(f"meta, 1 layer: {seconds:.2f} s; {tr.summary()}")
    print(f"  activations per layer {act / gib:.2f} GiB ({act:,} B); x{LAYERS} = {LAYERS * act / gib:.1f} GiB")
    noted = sorted({f"#{n.index} {n.name}" for n in tr.nodes if n.note})
    print(f"  nodes noted as meta-specific: {', '.join(noted) or 'none'}")
    seconds, tr, act_fake = run(FakeTensorMode(), 1)
    print(f"fake cpu, 1 layer: {seconds:.2f} s; activations {act_fake / gib:.2f} GiB ({act_fake:,} B); "
          f"x{LAYERS} = {LAYERS * act_fake / gib:.1f} GiB; attention node: "
          f"{[n.name for n in tr.nodes if 'Attention' in n.name]}")
    seconds, tr, act_all = run(torch.device("meta"), LAYERS)
    print(f"meta, {LAYERS} layers: {seconds:.2f} s; {len(tr.nodes):,} nodes; activations "
          f"{act_all / gib:.1f} GiB ({act_all:,} B)")


if __name__ == "__main__":
    main()
