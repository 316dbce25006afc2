"""Storage identity: which allocation a tensor lives in, and how big that allocation is."""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef

StorageKey = tuple[str, int]


def storage_key(t: torch.Tensor) -> StorageKey:
    """The identity of the allocation behind `t`: (device, base address of its storage)."""
    return (str(t.device), t.untyped_storage().data_ptr())


def storage_nbytes(t: torch.Tensor) -> int:
    """Bytes of the whole backing allocation of `t`, not just the elements `t` shows."""
    return t.untyped_storage().nbytes()


def visible_nbytes(t: torch.Tensor) -> int:
    """Bytes of the elements `t` shows (numel × element size)."""
    return t.numel() * t.element_size()


CUDA_BLOCK = 512  # the CUDA caching allocator hands out multiples of 512 bytes


def allocated_bytes(nbytes: int, device: str) -> int:
    """What an allocator counts for a storage of `nbytes`: CUDA rounds up to 512-byte blocks."""
    if device.startswith("cuda"):
        return -(-nbytes // CUDA_BLOCK) * CUDA_BLOCK if nbytes else 0
    return nbytes


def weak_storage(t: torch.Tensor) -> StorageWeakRef:
    """A weak reference to the storage of `t`: tells when the memory is really gone."""
    return StorageWeakRef(t.untyped_storage())


def format_exact(n: int) -> str:
    """Bytes in short form with the exact count: `16.0 KiB (16,388 B)`."""
    return format_bytes(n) if abs(n) < 1024 else f"{format_bytes(n)} ({n:,} B)"


def format_bytes(n: int | None) -> str:
    """Bytes in a short human form: 20 B, 4.0 KiB, 3.8 MiB."""
    if n is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
