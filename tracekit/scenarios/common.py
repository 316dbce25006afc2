"""What the scenarios share: the tensor size, running a call for its error, timing, comparing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from ..memory import on_device, synchronize
from ..storage import allocated_bytes

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

N = 4096  # elements in the scenario tensors: 16 KiB of float32


def error_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """PyTorch's message if fn(*args, **kwargs) raises, else None."""
    try:
        fn(*args, **kwargs)
    except RuntimeError as err:
        return str(err)
    return None


def predicted(storages: list[Any], device: str) -> int:
    """Bytes this device's allocator hands out for these storages: a storage elsewhere (a Python
    number's 0-dim CPU tensor saved beside CUDA tensors, say) takes none of them."""
    measured = torch.device(device)
    return sum(allocated_bytes(s.nbytes, device) for s in storages
               if s.device is None or on_device(torch.device(s.device), measured))  # no device known: counted


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute elementwise difference."""
    return float((a.detach() - b.detach()).abs().max())


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """fn()'s result and its wall time in seconds, the device synchronized before and after."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


def take_grads(ws: list[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of the weights' gradients, which are then cleared for the next run."""
    out = [w.grad.clone() for w in ws]
    for w in ws:
        w.grad = None
    return out
