"""Seeded small models: the same weights and batches on every machine, each drawn in a fixed
order from one `torch.Generator` on the CPU, then moved to the device."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def seeded_mlp(
    sizes: Sequence[int], activation: Callable[[], torch.nn.Module], *, scale: float, seed: int
) -> tuple[torch.nn.Sequential, torch.Generator]:
    """Linear layers of these sizes with `activation` between them, every parameter redrawn as
    randn × scale from a generator seeded with `seed`; returns the model (on the CPU) and the
    generator, for the caller to draw its batch from next."""
    layers: list[torch.nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        layers += [activation()] if i else []
        layers.append(torch.nn.Linear(fan_in, fan_out))
    model = torch.nn.Sequential(*layers)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model, gen


def seeded_chain(
    batch: int, width: int, depth: int, device: torch.device, *, seed: int = 0
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A batch x (batch × width), then `depth` weight matrices (width × width, randn / √width,
    requiring grad), drawn in that order from a generator seeded with `seed`, on `device`."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=gen).to(device)
    scale = width**0.5
    ws = [(torch.randn(width, width, generator=gen) / scale).to(device).requires_grad_(True) for _ in range(depth)]
    return x, ws
