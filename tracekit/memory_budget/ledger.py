"""Naming every live byte: the allocation stream (with the frees the CPU profiler does not report
put back) followed allocation by allocation, each given the category of who held it at each
mark, and from that each category's bytes after every allocator event."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory import AllocationStream
from .result import ALLOCATED, Moment


def _resolve(seen: dict[int, str | None], fallback: str) -> tuple[dict[int, str], str]:
    """Per mark where an allocation was live: the holder seen then, else the next one seen (what it
    is becoming: a gradient before AccumulateGrad takes it), else `fallback`; and the category
    before its first mark."""
    resolved: dict[int, str] = {}
    ahead: str | None = None
    for k in reversed(list(seen)):
        ahead = seen[k] or ahead
        resolved[k] = ahead or fallback
    first = min(seen) if seen else None
    return resolved, resolved[first] if first is not None else fallback


def _fill_unreported(stream: AllocationStream, observations: list[dict[int, tuple[str, int]]],
                     gone: list[list[int]]) -> tuple[AllocationStream, int]:
    """The stream with the frees the CPU profiler does not report (of memory allocated before it
    started) put back: at the first mark that finds the storage gone, or just before its address
    is handed out again. Returns the stream and how many frees were put back."""
    before = {ptr: nbytes for ptr, (_, nbytes) in observations[0].items()}
    mark_at = [p for _, p in stream.marks]
    events: list[tuple[int, int]] = []
    marks: list[tuple[str, int]] = []
    added = 0
    k = 0
    for i in range(len(stream.events) + 1):
        while k < len(mark_at) and mark_at[k] == i:
            for ptr in gone[k]:
                if ptr in before:
                    events.append((ptr, -before.pop(ptr)))
                    added += 1
            marks.append((stream.marks[k][0], len(events)))
            k += 1
        if i == len(stream.events):
            break
        ptr, d = stream.events[i]
        if ptr in before:
            if d > 0:  # the address is reused: the old allocation was freed unreported
                events.append((ptr, -before[ptr]))
                added += 1
            del before[ptr]
        events.append((ptr, d))
    return AllocationStream(stream.device, events, marks, stream.reserved, stream.allocated_at_start,
                            stream.reserved_at_start), added


@dataclass(eq=False)
class _Allocation:
    """One allocation live during the step: its bytes, the events that made and freed it, who
    held it at each mark where it was live, and from that its category at each mark."""

    size: int
    made: int  # allocator event index; -1 for an allocation older than the step
    freed: int | None = None
    holders: dict[int, str | None] = field(default_factory=dict)  # mark -> the holder seen then (None: none)
    categories: dict[int, str] = field(default_factory=dict)  # mark -> its category from that mark on
    first_category: str = "unattributed"  # its category before its first mark

    def resolve(self) -> None:
        """Settle the categories from the holders (see _resolve)."""
        fallback = "temporary workspaces" if self.made >= 0 and self.freed is not None else "unattributed"
        self.categories, self.first_category = _resolve(self.holders, fallback)

    def category(self, mark: int) -> str:
        """Its category between this mark and the next."""
        return self.categories.get(mark, self.first_category)


@dataclass
class _Ledger:
    """The step's allocations in stream order: which one each event makes or frees, which are live
    at each mark, and the measured bytes at the start."""

    by_event: list[_Allocation]
    live_at_mark: list[list[_Allocation]]
    start: int


def _ledger(stream: AllocationStream, observations: list[dict[int, tuple[str, int]]]) -> _Ledger:
    """Follow the allocation stream up to the last mark, noting at each mark who holds each live allocation."""
    mark_at = [p for _, p in stream.marks]
    events = stream.events[:mark_at[-1]]  # events after the last mark are not part of the step
    older: list[_Allocation] = []  # allocations made before the step
    live: dict[int, _Allocation] = {}  # pointer -> the allocation there now
    for ptr, (_, nbytes) in observations[0].items():
        live[ptr] = _Allocation(nbytes, -1)
        older.append(live[ptr])
    alive = set(live)
    for ptr, d in events:  # frees of allocations made before the step that nothing identified
        if d > 0:
            alive.add(ptr)
        elif ptr in alive:
            alive.discard(ptr)
        else:
            live[ptr] = _Allocation(-d, -1)
            older.append(live[ptr])
    unidentified = None  # CUDA knows the absolute count: what no storage explains is one allocation
    if stream.allocated_at_start is not None:
        unidentified = _Allocation(0, -1)
    by_event: list[_Allocation] = []
    live_at_mark: list[list[_Allocation]] = []
    k = 0
    for i in range(len(events) + 1):
        while k < len(mark_at) and mark_at[k] == i:
            held = observations[k]
            for ptr, allocation in live.items():
                holder = held.get(ptr)
                allocation.holders[k] = holder[0] if holder else None
            live_at_mark.append(list(live.values()) + ([unidentified] if unidentified is not None else []))
            k += 1
        if i == len(events):
            break
        ptr, d = events[i]
        if d > 0:
            if ptr in live:  # a free the stream missed: the older allocation ends here
                live[ptr].freed = i
            allocation = live[ptr] = _Allocation(d, i)
        else:
            allocation = live.pop(ptr)
            allocation.freed = i
            allocation.size = -d  # the allocator's own size wins over the storage's
        by_event.append(allocation)
    start = sum(a.size for a in older)
    if unidentified is not None:
        unidentified.size = stream.allocated_at_start - start
        start = stream.allocated_at_start
    for allocation in set(by_event) | set(older):
        allocation.resolve()
    return _Ledger(by_event, live_at_mark, start)


def _attribute(stream: AllocationStream, observations: list[dict[int, tuple[str, int]]],
               labels: list[str]) -> tuple[list[int], dict[str, list[int]], list[Moment]]:
    """Measured bytes after every allocator event, each category's bytes at the same points, and
    the moment of every mark; the categories add up to the measured bytes everywhere."""
    ledger = _ledger(stream, observations)
    mark_at = [p for _, p in stream.marks]
    n = mark_at[-1]
    events = stream.events[:n]
    measured = [ledger.start] * (n + 1)
    for i, (_, d) in enumerate(events):
        measured[i + 1] = measured[i] + d
    series = {c: [0] * (n + 1) for c in ALLOCATED}
    moments = []
    for k, pos in enumerate(mark_at):
        totals = dict.fromkeys(ALLOCATED, 0)
        for allocation in ledger.live_at_mark[k]:
            totals[allocation.category(k)] += allocation.size
        moments.append(Moment(labels[k], dict(totals), measured[pos], pos))
        for c in ALLOCATED:
            series[c][pos] = totals[c]
        end = mark_at[k + 1] if k + 1 < len(mark_at) else n
        for i in range(pos, end):
            allocation = ledger.by_event[i]
            totals[allocation.category(k)] += allocation.size if events[i][1] > 0 else -allocation.size
            for c in ALLOCATED:
                series[c][i + 1] = totals[c]
    return measured, series, moments
