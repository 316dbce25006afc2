"""Storage identity: which allocation a tensor lives in, and how big that allocation is."""

from __future__ import annotations

import torch

from .internals import drop_weak_ref, fake_tensor_type, storage_identity, storage_weak_ref, weak_expired, weak_ref

# storage weak references live in internals.py
__all__ = ["drop_weak_ref", "storage_weak_ref", "weak_expired", "weak_ref"]

StorageKey = tuple[str, int]


def is_fake(t: torch.Tensor) -> bool:
    """True for a FakeTensor (torch._subclasses.FakeTensorMode): a device and a shape, no data."""
    fake = fake_tensor_type()
    return fake is not None and isinstance(t, fake)


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # types that are never fake
_DEVICE_TEXT: dict[torch.device, str] = {}


def has_data(t: torch.Tensor) -> bool:
    """False for tensors that carry no values or memory: on the meta device, or fake."""
    if t.is_meta:
        return False
    return type(t) in _PLAIN or not is_fake(t)


def device_text(device: torch.device) -> str:
    """`cpu`, `cuda:0` (cached: str() of a device is slow next to a dict lookup)."""
    text = _DEVICE_TEXT.get(device)
    if text is None:
        text = _DEVICE_TEXT[device] = str(device)
    return text


def storage_key(t: torch.Tensor) -> StorageKey:
    """The identity of the allocation behind `t`: (device, base address of its storage).

    Meta and fake tensors have no memory (every data pointer is 0), so for them the key is
    the storage object's own identity (its StorageImpl, which every view shares and which
    stays put while anything holds it)."""
    try:
        if type(t) in _PLAIN and not t.is_meta:  # a real tensor (the common case), without has_data's checks
            return ("cpu" if t.is_cpu else device_text(t.device), t.untyped_storage().data_ptr())
        storage = t.untyped_storage()
    except (NotImplementedError, RuntimeError):  # no storage to read: sparse, torch.func's wrappers
        return (f"{t.device} ({t.layout}, no storage)", id(t))
    if has_data(t):
        try:
            return (device_text(t.device), storage.data_ptr())
        except RuntimeError:  # a wrapper subclass (TwoTensor, DTensor): its own storage holds no memory
            pass
    return (f"{t.device} (no data)", storage_identity(storage))


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
