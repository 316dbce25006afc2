"""What a schedule costs in work, not in memory: the aten ops it runs (counted, deterministic)
and its CPU time (the median of interleaved repeats on one thread, still a measurement)."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .internals import TorchDispatchMode

MATMULS = frozenset({"mm", "bmm", "addmm", "matmul", "baddbmm", "addbmm", "linear"})
VIEWS_AND_COPIES = frozenset({"t", "transpose", "view", "_unsafe_view", "reshape", "expand", "alias", "detach",
                              "clone", "copy_", "empty", "empty_like", "zeros_like", "ones_like", "new_empty",
                              "new_zeros", "fill_", "zero_", "slice", "select", "as_strided", "unsqueeze",
                              "squeeze", "permute", "_to_copy", "lift_fresh"})


class OpCount(Counter):
    """aten op name (without overload) -> how many times it ran."""

    def computing(self) -> dict[str, int]:
        """The ops that compute values (matmuls and pointwise), in the order they first ran:
        views, copies, allocations and the detaches autograd makes when it saves an output left out."""
        return {op: n for op, n in self.items() if op not in VIEWS_AND_COPIES}

    @property
    def matmuls(self) -> int:
        """Matrix products: mm, bmm, addmm, ..."""
        return sum(n for op, n in self.items() if op in MATMULS)

    @property
    def pointwise(self) -> int:
        """Everything else that computes: not a matmul, not a view, copy or allocation."""
        return sum(n for op, n in self.items() if op not in MATMULS and op not in VIEWS_AND_COPIES)


class _Counting(TorchDispatchMode):
    def __init__(self, counts: OpCount) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def count_ops() -> Iterator[OpCount]:
    """Count the aten ops that run inside the block, forward and backward (on CPU backward runs on
    this thread; a checkpoint's recomputation inside backward is counted too)."""
    counts = OpCount()
    with _Counting(counts):
        yield counts


def cpu_ms(runs: dict[str, Callable[[], Any]], repeats: int = 7) -> dict[str, float]:
    """Median CPU time (this thread's, in ms) of each run, the runs interleaved round by round on
    one intra-op thread, after one warm-up each: less noise than one wall-clock run, not zero."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for run in runs.values():
            run()
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(repeats):
            for name, run in runs.items():
                t0 = time.thread_time()
                run()
                times[name].append((time.thread_time() - t0) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return {name: statistics.median(t) for name, t in times.items()}
