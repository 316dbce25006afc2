"""Naming every live byte: the allocation stream (with the frees the CPU profiler does not report
put back) followed allocation by allocation, each given the category of who held it at each
mark, and from that each category's bytes after every allocator event."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..memory import AllocationStream
from .result import ALLOCATED, Moment

Holder = tuple[str, int]  # (category, bytes): who holds a storage at a mark


class Observations:
    """Who held each storage (by its key) at each mark: the first mark's holders in full, then per
    mark only what changed (a key now held by another category, or by none: None), so that a step
    with a mark per reverse rule costs its changes, not its storages times its marks."""

    def __init__(self) -> None:
        self.first: dict[int, Holder] = {}
        self.changes: list[dict[int, Holder | None]] = []  # per mark; the first mark's is empty
        self.current: dict[int, Holder] = {}  # the holders at the last mark

    def __len__(self) -> int:
        return len(self.changes)

    def add(self, holders: dict[int, Holder]) -> None:
        """The next mark, from every holder seen at it."""
        if not self.changes:
            self.first, self.current = dict(holders), dict(holders)
            self.changes.append({})
            return
        current = self.current
        diff: dict[int, Holder | None] = {k: v for k, v in holders.items() if current.get(k) != v}
        diff.update(dict.fromkeys(current.keys() - holders.keys()))
        self.change(diff)

    def change(self, diff: dict[int, Holder | None]) -> None:
        """The next mark, from what changed since the last."""
        for key, holder in diff.items():
            if holder is None:
                self.current.pop(key, None)
            else:
                self.current[key] = holder
        self.changes.append(diff)

    @classmethod
    def of(cls, snapshots: list[dict[int, Holder]] | Observations) -> Observations:
        """Observations from each mark's holders in full (or as they are)."""
        if isinstance(snapshots, Observations):
            return snapshots
        out = cls()
        for holders in snapshots:
            out.add(holders)
        return out


def _fill_unreported(stream: AllocationStream, observations: list[dict[int, Holder]] | Observations,
                     gone: list[list[int]]) -> tuple[AllocationStream, int]:
    """The stream with the frees the CPU profiler does not report (of memory allocated before it
    started) put back: at the first mark that finds the storage gone, or just before its address
    is handed out again. A free it reports of memory allocated before it started takes the size of
    the storage seen there: the CPU allocator's table of sizes keeps the size of an older allocation
    at the same address (made under an earlier profiler, freed with none running), and reports that
    (a 1 KiB gradient freed as 8 KiB). Returns the stream and how many frees were put back."""
    before = {ptr: nbytes for ptr, (_, nbytes) in Observations.of(observations).first.items()}
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
            else:  # its free, reported: with the storage's size (see above)
                d = -before[ptr]
            del before[ptr]
        events.append((ptr, d))
    return AllocationStream(stream.device, events, marks, stream.reserved, stream.allocated_at_start,
                            stream.reserved_at_start), added


@dataclass(eq=False)
class _Allocation:
    """One allocation live during the step: its bytes, the events that made and freed it, who held it
    from each mark where that changed (runs over the marks where it was live), and from that its
    category over each run, and where the category changes."""

    size: int
    made: int  # allocator event index; -1 for an allocation older than the step
    freed: int | None = None
    runs: list[list[Any]] = field(default_factory=list)  # [first mark, the holder seen then (None: none)]
    categories: list[str] = field(default_factory=list)  # per run: its category over that run
    first_category: str = "unattributed"  # its category before its first mark (and over its first run)

    def see(self, mark: int, holder: str | None) -> None:
        """Who holds it at this mark (called at the marks where its holder may have changed)."""
        runs = self.runs
        if runs and runs[-1][0] == mark:
            runs[-1][1] = holder
            if len(runs) > 1 and runs[-2][1] == holder:
                runs.pop()
        elif not runs or runs[-1][1] != holder:
            runs.append([mark, holder])

    def resolve(self) -> None:
        """The category over each run: the holder seen then, else the next one seen (what it is
        becoming: a gradient before AccumulateGrad takes it), else a temporary workspace (made and
        freed within the step) or unattributed."""
        fallback = "temporary workspaces" if self.made >= 0 and self.freed is not None else "unattributed"
        ahead: str | None = None
        categories = [fallback] * len(self.runs)
        for j in range(len(self.runs) - 1, -1, -1):
            ahead = self.runs[j][1] or ahead
            categories[j] = ahead or fallback
        self.categories = categories
        self.first_category = categories[0] if categories else fallback

    @property
    def last_category(self) -> str:
        """Its category over its last run (before its first mark if it has none)."""
        return self.categories[-1] if self.categories else self.first_category

    def shifts(self) -> Iterator[tuple[int, str, str]]:
        """(mark, category before, category from it on) where its category changes."""
        for j in range(1, len(self.runs)):
            if self.categories[j] != self.categories[j - 1]:
                yield self.runs[j][0], self.categories[j - 1], self.categories[j]


@dataclass
class _Ledger:
    """The step's allocations in stream order: which one each event makes or frees, those live at the
    first mark (and the unidentified bytes), where categories change (per mark: allocation, from, to;
    to None where an allocation the stream missed the free of is dropped) and the bytes at the start."""

    by_event: list[_Allocation]
    at_first_mark: list[_Allocation]
    shifts: dict[int, list[tuple[_Allocation, str, str | None]]]
    start: int


def _ledger(stream: AllocationStream, observations: Observations) -> _Ledger:
    """Follow the allocation stream up to the last mark, noting who holds each live allocation at the
    marks where that may have changed: the first; for the others, the storages whose holder changed
    and the allocations made since the mark before."""
    mark_at = [p for _, p in stream.marks]
    events = stream.events[:mark_at[-1]]  # events after the last mark are not part of the step
    older: list[_Allocation] = []  # allocations made before the step
    live: dict[int, _Allocation] = {}  # pointer -> the allocation there now
    for ptr, (_, nbytes) in observations.first.items():
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
    at_first_mark: list[_Allocation] = []
    dropped: dict[int, list[_Allocation]] = {}  # mark -> allocations whose free the stream missed before it
    fresh: list[tuple[int, _Allocation]] = []  # made since the last mark
    held: dict[int, Holder] = {}
    k = 0
    for i in range(len(events) + 1):
        while k < len(mark_at) and mark_at[k] == i:
            if k == 0:
                held = dict(observations.first)
                at_first_mark = list(live.values()) + ([unidentified] if unidentified is not None else [])
                for ptr, allocation in live.items():
                    holder = held.get(ptr)
                    allocation.see(0, holder[0] if holder else None)
            else:
                diff = observations.changes[k]
                for ptr, holder in diff.items():
                    if holder is None:
                        held.pop(ptr, None)
                    else:
                        held[ptr] = holder
                    allocation = live.get(ptr)
                    if allocation is not None:
                        allocation.see(k, holder[0] if holder else None)
                for ptr, allocation in fresh:  # made since the mark before, still there: its holder now
                    if live.get(ptr) is allocation and ptr not in diff:
                        holder = held.get(ptr)
                        allocation.see(k, holder[0] if holder else None)
            fresh = []
            k += 1
        if i == len(events):
            break
        ptr, d = events[i]
        if d > 0:
            if ptr in live:  # a free the stream missed: the older allocation ends here
                live[ptr].freed = i
                dropped.setdefault(k, []).append(live[ptr])
            allocation = live[ptr] = _Allocation(d, i)
            fresh.append((ptr, allocation))
        else:
            allocation = live.pop(ptr)
            allocation.freed = i
            allocation.size = -d  # the allocator's own size wins over the storage's
        by_event.append(allocation)
    start = sum(a.size for a in older)
    if unidentified is not None:
        unidentified.size = stream.allocated_at_start - start
        start = stream.allocated_at_start
    shifts: dict[int, list[tuple[_Allocation, str, str | None]]] = {}
    for allocation in set(by_event) | set(older):
        allocation.resolve()
        for mark, before, after in allocation.shifts():
            shifts.setdefault(mark, []).append((allocation, before, after))
    for mark, allocations in dropped.items():
        shifts.setdefault(mark, []).extend((a, a.last_category, None) for a in allocations)
    if unidentified is not None:
        unidentified.resolve()
    return _Ledger(by_event, at_first_mark, shifts, start)


def _attribute(stream: AllocationStream, observations: list[dict[int, Holder]] | Observations,
               labels: list[str]) -> tuple[list[int], dict[str, list[int]], list[Moment]]:
    """Measured bytes after every allocator event, each category's bytes at the same points, and
    the moment of every mark; the categories add up to the measured bytes everywhere. Linear in
    the events, marks and changes of holder: the totals run on, shifted where a category changes."""
    ledger = _ledger(stream, Observations.of(observations))
    mark_at = [p for _, p in stream.marks]
    n = mark_at[-1]
    events = stream.events[:n]
    measured = [ledger.start] * (n + 1)
    for i, (_, d) in enumerate(events):
        measured[i + 1] = measured[i] + d
    series = {c: [0] * (n + 1) for c in ALLOCATED}
    moments = []
    totals = dict.fromkeys(ALLOCATED, 0)
    for allocation in ledger.at_first_mark:
        totals[allocation.first_category] += allocation.size
    for k, pos in enumerate(mark_at):
        for allocation, before, after in ledger.shifts.get(k, ()):
            totals[before] -= allocation.size
            if after is not None:
                totals[after] += allocation.size
        moments.append(Moment(labels[k], dict(totals), measured[pos], pos))
        for c in ALLOCATED:
            series[c][pos] = totals[c]
        end = mark_at[k + 1] if k + 1 < len(mark_at) else n
        for i in range(pos, end):
            allocation = ledger.by_event[i]
            if events[i][1] > 0:
                totals[allocation.first_category] += allocation.size
            else:
                totals[allocation.last_category] -= allocation.size
            for c in ALLOCATED:
                series[c][i + 1] = totals[c]
    return measured, series, moments
