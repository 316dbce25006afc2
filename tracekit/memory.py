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

from .errors import DeviceUnavailableError, TracekitError
from .internals import profiler_event_types

NO_CUDA = "CUDA is not available on this machine: nothing was run on it."
# A CPU mark allocates and frees a uint8 tensor of a unique size: the allocator's own event
# stream then says exactly where the mark falls (op and memory timestamps can be skewed).
_SENTINEL = 1_000_003
_CUDA_SENTINEL = 512  # CUDA rounds sizes to 512-byte blocks: mark i allocates 512 × (i + 1) bytes


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
    allocations: AllocationStream | None = None  # every allocation and free, when asked for


@dataclass
class AllocationStream:
    """Every allocation and free on one device during a region, in order, with the marks between them.

    `events[i]` is (pointer, signed bytes): positive an allocation, negative a free. A mark at
    position p was taken after the first p events. The marks' own probe allocations are removed.
    """

    device: str
    events: list[tuple[int, int]]
    marks: list[tuple[str, int]]  # (label, position)
    reserved: list[int] | None = None  # CUDA: bytes reserved from the driver after each event
    allocated_at_start: int | None = None  # CUDA: bytes allocated at the first mark (absolute)
    reserved_at_start: int | None = None  # CUDA: bytes reserved at the first mark


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

    def __init__(self, device: str | torch.device = "cpu", allocations: bool = False, collect: bool = True) -> None:
        self.device = torch.device(device)
        self.result: Measurement | None = None
        self._marks: list[tuple[str, int, float, int]] = []  # CUDA: label, bytes, time, reserved
        self._labels: list[str] = []  # CPU: mark i is a sentinel allocation of _SENTINEL + i bytes
        # label, bytes, pointer of each mark's probe (CUDA: and the allocator's total just before it)
        self._sentinels: list[tuple[Any, ...]] = []
        self._profiler: Any = None
        self._allocations = allocations  # also record every allocation (pointer, size) in order
        self._collect = collect  # run the full cycle collector first (slow in a big process)

    def __enter__(self) -> MemoryProbe:
        gc.collect(2 if self._collect else 0)
        synchronize(self.device)
        self._t0 = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        if self.device.type != "cuda" or self._allocations:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            with _quiet_stderr():
                self._profiler.__enter__()
        return self

    def mark(self, label: str) -> None:
        """Record the live bytes at this point of the program under `label`."""
        if self.device.type == "cuda":
            synchronize(self.device)
            allocated = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            self._marks.append((label, allocated - self._start, time.perf_counter() - self._t0, reserved))
            if self._allocations:  # the probe's event is the one of its size and address at this total
                size = _CUDA_SENTINEL * (len(self._sentinels) + 1)
                probe = torch.empty(size, dtype=torch.uint8, device=self.device)
                self._sentinels.append((label, size, probe.data_ptr(), allocated))
                del probe
        else:
            self._labels.append(label)
            probe = torch.empty(_SENTINEL + len(self._labels) - 1, dtype=torch.uint8)  # allocated, freed at once
            self._sentinels.append((label, probe.numel(), probe.data_ptr()))
            del probe

    def __exit__(self, *exc: object) -> None:
        synchronize(self.device)
        seconds = time.perf_counter() - self._t0
        if self._profiler is not None:
            with _quiet_stderr():
                self._profiler.__exit__(*exc)
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
        else:
            self.result = _from_profiler(self._profiler, self._labels, seconds)
        if self._allocations:
            self.result.allocations = _allocation_stream(self._profiler, self.device, self._sentinels)


RawEvent = tuple[int, int, int, int, int]  # (time, pointer, signed bytes, total allocated, total reserved)


def on_device(where: torch.device, device: torch.device) -> bool:
    """Whether memory on `where` is counted by `device`'s allocator (`cuda` is any CUDA device,
    `cuda:1` that one only; `cpu` is never `cuda`)."""
    return where.type == device.type and (device.index is None or where.index is None or where.index == device.index)


def _allocation_events(prof: Any, device: torch.device) -> list[RawEvent]:
    """(time, pointer, bytes, total allocated, total reserved) of every allocation event on `device`."""
    _EventType = profiler_event_types()

    out = []
    todo = list(reversed(prof.profiler.kineto_results.experimental_event_tree()))
    while todo:  # preorder, so that equal timestamps keep the order the events were recorded in
        node = todo.pop()
        todo.extend(reversed(node.children))
        if node.typed[0] != _EventType.Allocation:
            continue
        f = node.extra_fields
        if not on_device(f.device, device):
            continue
        out.append((node.start_time_ns, f.ptr, f.alloc_size, f.total_allocated, f.total_reserved))
    out.sort(key=lambda e: e[0])
    return out


def _allocation_stream(prof: Any, device: torch.device, sentinels: list[tuple[Any, ...]]) -> AllocationStream:
    """The region's allocations in order, each mark placed where its probe allocation happened."""
    return stream_from_events(_allocation_events(prof, device), device, sentinels)


def stream_from_events(raw: list[RawEvent], device: torch.device,
                       sentinels: list[tuple[Any, ...]]) -> AllocationStream:
    """The AllocationStream from the profiler's allocation events (`sentinels`: each mark's label,
    probe size and pointer, and on CUDA the allocator's total just before the probe: a 512-byte
    probe's size and address alone also match an ordinary allocation made earlier at that address).
    The marks' probes are taken out. On CUDA every event also carries
    the allocator's total, so a free the profiler did not report (seen with torch 2.11 on an H200:
    a few per step) shows as a gap in the totals and is put back where it happened: a probe's is
    dropped, another's is given the pointer of the live allocation of that size (the one whose
    address is handed out again next, where several fit)."""
    cuda = device.type == "cuda"
    events: list[tuple[int, int]] = []
    reserved: list[int] = []
    marks: list[tuple[str, int]] = []
    allocated_at_start = reserved_at_start = None
    pending = list(sentinels)
    probes: dict[int, int] = {}  # a mark's probe allocation not seen freed yet: pointer -> bytes
    live: dict[int, int] = {}  # CUDA: pointer -> bytes of each allocation seen and not freed
    total_before: int | None = None
    for i, (_, ptr, nbytes, total, total_reserved) in enumerate(raw):
        if cuda and total_before is not None and total - nbytes < total_before:
            for gone, size in _unreported_frees(total_before - (total - nbytes), i, raw, probes, live):
                if marks:
                    events.append((gone, -size))
                    reserved.append(reserved[-1] if reserved else total_reserved)
        total_before = total
        if pending and nbytes == pending[0][1] and ptr == pending[0][2] and (
                len(pending[0]) < 4 or total - nbytes == pending[0][3]):
            label = pending.pop(0)[0]
            if not marks:
                allocated_at_start, reserved_at_start = total - nbytes, total_reserved
            marks.append((label, len(events)))
            probes[ptr] = nbytes
            continue
        if nbytes < 0 and probes.get(ptr) == -nbytes:  # the probe's own free
            del probes[ptr]
            continue
        if cuda:  # what a gap in the totals can be a free of
            if nbytes > 0:
                live[ptr] = nbytes
            else:
                live.pop(ptr, None)
        if not marks:
            continue  # before the first mark: not part of the measured region
        events.append((ptr, nbytes))
        reserved.append(total_reserved)
    if pending:
        raise TracekitError(f"{len(pending)} marks were not found in the allocator's event stream: "
                            "measure again (nothing else should allocate the same sizes meanwhile).")
    return AllocationStream(str(device), events, marks, reserved if cuda else None,
                            allocated_at_start if cuda else None, reserved_at_start if cuda else None)


def _unreported_frees(missing: int, at: int, raw: list[RawEvent], probes: dict[int, int],
                      live: dict[int, int]) -> list[tuple[int, int]]:
    """The free behind `missing` bytes the allocator's total lost before event `at` without an
    event: [(pointer, bytes)] of the live allocation freed, or [] for a mark's probe (both maps lose
    what was freed). Of the probes and live allocations of that size, the one whose address is
    handed out again first (it must have been freed), else the latest probe, else the first live
    one. A gap nothing of that size explains is left as it is."""
    fits = [p for p, size in probes.items() if size == missing] + [p for p, size in live.items() if size == missing]
    if not fits:
        return []
    gone = fits[0] if len(fits) == 1 else _freed_first(fits, raw[at:]) or (
        max((p for p in fits if p in probes), key=list(probes).index, default=fits[0]))
    if probes.get(gone) == missing:
        del probes[gone]
        return []
    del live[gone]
    return [(gone, missing)]


def _freed_first(pointers: list[int], later: list[RawEvent]) -> int | None:
    """Of these live addresses, the first handed out again before any free of it (None: none is)."""
    undecided = set(pointers)
    for _, ptr, nbytes, _, _ in later:
        if ptr in undecided:
            if nbytes > 0:
                return ptr
            undecided.discard(ptr)
            if not undecided:
                return None
    return None


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


def measure(device: str | torch.device = "cpu", allocations: bool = False, collect: bool = True) -> MemoryProbe:
    """Measure the bytes allocated on `device` inside a `with` block (see MemoryProbe); with
    `allocations=True` also keep every allocation and free in order (`result.allocations`);
    `collect=False` skips the full garbage collection before it (only the youngest generation)."""
    return MemoryProbe(device, allocations, collect)
