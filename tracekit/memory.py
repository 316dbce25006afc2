"""Measured memory, independent of the trace: the CUDA caching allocator's counters, and on
CPU the allocator's own alloc/free reports collected by the PyTorch profiler."""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import TracekitError

NO_CUDA = "CUDA is not available on this machine: nothing was run on it."
# A CPU mark allocates and frees a uint8 tensor of a unique size: the allocator's own event
# stream then says exactly where the mark falls (op and memory timestamps can be skewed).
_SENTINEL = 1_000_003


class DeviceUnavailableError(TracekitError, RuntimeError):
    """The requested device is not present here."""


def check_device(device: str) -> torch.device:
    """The torch.device for a name, or DeviceUnavailableError with what to do."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(f"{NO_CUDA} Use device='cpu', or run on a machine with a GPU.")
    if dev.type not in ("cpu", "cuda"):
        raise DeviceUnavailableError(f"device {device!r} is not supported: use 'cpu' or 'cuda'.")
    return dev


def synchronize(device: str | torch.device) -> None:
    """Wait for queued kernels, so that times and counters are final."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Measurement:
    """Bytes allocated on one device during a region, relative to its start."""

    device: str
    source: str  # where the numbers come from
    peak: int = 0  # highest live bytes above the start
    end: int = 0  # live bytes above the start when the region ended
    marks: dict[str, int] = field(default_factory=dict)  # live bytes above the start at each mark
    reserved: int | None = None  # CUDA: bytes the caching allocator holds from the driver at the end
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (seconds from start, live bytes)
    seconds: float = 0.0
    peak_after: str | None = None  # CPU: the last mark before the peak (CUDA does not say when)
    start: int = 0  # CUDA: bytes already allocated when the region began (CPU: unknown, 0)
    reserved_marks: dict[str, int] = field(default_factory=dict)  # CUDA: reserved bytes at each mark


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence C-level stderr (the profiler logs a timestamped line at start and stop)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class MemoryProbe:
    """`with MemoryProbe(device) as probe: ...; probe.mark("after forward")` -> probe.result."""

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.result: Measurement | None = None
        self._marks: list[tuple[str, int, float, int]] = []  # CUDA: label, bytes, time, reserved
        self._labels: list[str] = []  # CPU: mark i is a sentinel allocation of _SENTINEL + i bytes
        self._profiler: Any = None

    def __enter__(self) -> MemoryProbe:
        gc.collect()
        synchronize(self.device)
        self._t0 = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            with _quiet_stderr():
                self._profiler.__enter__()
        return self

    def mark(self, label: str) -> None:
        """Record the live bytes at this point of the program under `label`."""
        if self.device.type == "cuda":
            synchronize(self.device)
            live = torch.cuda.memory_allocated(self.device) - self._start
            reserved = torch.cuda.memory_reserved(self.device)
            self._marks.append((label, live, time.perf_counter() - self._t0, reserved))
        else:
            self._labels.append(label)
            torch.empty(_SENTINEL + len(self._labels) - 1, dtype=torch.uint8)  # allocated, freed at once

    def __exit__(self, *exc: object) -> None:
        synchronize(self.device)
        seconds = time.perf_counter() - self._t0
        if self.device.type == "cuda":
            live = torch.cuda.memory_allocated(self.device) - self._start
            self.result = Measurement(
                str(self.device), "CUDA caching allocator (memory_allocated / max_memory_allocated)",
                peak=torch.cuda.max_memory_allocated(self.device) - self._start, end=live,
                marks={label: b for label, b, _, _ in self._marks},
                reserved=torch.cuda.memory_reserved(self.device),
                timeline=[(t, b) for _, b, t, _ in self._marks] + [(seconds, live)], seconds=seconds,
                start=self._start, reserved_marks={label: r for label, _, _, r in self._marks},
            )
            return
        with _quiet_stderr():
            self._profiler.__exit__(*exc)
        self.result = _from_profiler(self._profiler, self._labels, seconds)


def _from_profiler(prof: Any, labels: list[str], seconds: float) -> Measurement:
    events = prof.profiler.kineto_results.events()
    memory = sorted(
        (e.start_ns(), e.nbytes()) for e in events
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    t0 = memory[0][0] if memory else 0
    sentinels = {_SENTINEL + i: label for i, label in enumerate(labels)}
    timeline, live, peak = [], 0, 0
    at_mark: dict[str, int] = {}
    last_label, peak_after = None, None
    for t, nbytes in memory:
        if abs(nbytes) in sentinels:
            if nbytes > 0:
                last_label = sentinels[nbytes]
                at_mark[last_label] = live
            continue
        live += nbytes
        if live > peak:
            peak, peak_after = live, last_label
        timeline.append(((t - t0) / 1e9, live))
    return Measurement("cpu", "CPU allocator reports (PyTorch profiler, profile_memory=True)",
                       peak=peak, end=live, marks=at_mark, timeline=timeline, seconds=seconds, peak_after=peak_after)


def measure(device: str | torch.device = "cpu") -> MemoryProbe:
    """Measure the bytes allocated on `device` inside a `with` block (see MemoryProbe)."""
    return MemoryProbe(device)
