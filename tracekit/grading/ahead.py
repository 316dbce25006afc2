"""The trusted side's work done beside a submission's sandbox rather than after it: the reference
answer's measured memory and the judges' truth depend only on the inputs, which are drawn before
the submission runs, so they are started first and waited for when the judging needs them.

Nothing here sees the submission: the reference runs in a sandbox of its own, and the truth is
computed in this process (one judge at a time: `trusted`) from the drawn inputs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from . import sandbox

TRUSTED_LOCK = threading.Lock()  # the judges compute truth with torch: one at a time keeps it simple
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tracekit-ahead")
_PEAKS: dict[tuple, Future] = {}
_PEAKS_LOCK = threading.Lock()


@contextlib.contextmanager
def trusted() -> Iterator[None]:
    """One judge at a time, computing with one thread: the sandboxes beside it keep the other cores busy
    (torch's threads fighting them for the cores made a judge's truth several times slower)."""
    with TRUSTED_LOCK:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def _measure_peak(exercise_id: str, question: str, config: str,
                  limits: tuple[tuple[str, int], ...]) -> tuple[str, int, str]:
    judges = importlib.import_module(f"tracekit.exercises.judges.{exercise_id}")
    done = sandbox.measure_reference(exercise_id, question, judges.reference_cells(question), json.loads(config),
                                     **dict(limits))
    return done["start"], done["peak_bytes"], done.get("how", "")


def reference_peak(exercise_id: str, question: str, sizes: dict, **limits: int) -> Future:
    """A future of (how the sandbox started, the memory high-water mark, what measured it) of the reference
    answer's measured workload at these sizes, in a sandbox like a submission's: measured once per
    grading process and sizes (the memory depends on the sizes, not on the values a student's seed
    draws); a measurement that failed is tried again by the next submission that needs it."""
    config = json.dumps(sizes, sort_keys=True)
    key = (exercise_id, question, config, tuple(sorted(limits.items())))
    kept = (*key, sandbox.start_kind())  # warm and cold inherit different pages: kept apart
    with _PEAKS_LOCK:
        known = _PEAKS.get(kept)
        if known is None or (known.done() and known.exception() is not None):
            known = _PEAKS[kept] = _POOL.submit(_measure_peak, *key)
    return known


def comparable_peak(future: Future, start: str, again: Callable[[], Future] | None = None,
                    how: str | None = None) -> int:
    """The reference's peak, once measured; where it started otherwise than the submission (the
    sandboxes went cold meanwhile) the one `again` gives (a measurement as sandboxes start now), and
    RuntimeError if that one differs too (a warm fork and a cold start are not comparable), or if it
    was measured otherwise than the submission's (`how`: a cgroup's whole count, or one process's)."""
    started, peak, measured_by = future.result()
    if started != start and again is not None:
        started, peak, measured_by = again().result()
    if started != start:
        raise RuntimeError(f"the reference ran {started}, the submission {start}: not comparable")
    if how is not None and measured_by != how:
        raise RuntimeError(f"the reference was measured by {measured_by or 'nothing'}, the submission by "
                           f"{how or 'nothing'}: not comparable")
    return peak


def _prepare(exercise_id: str, inputs: dict[str, dict]) -> None:
    judges = importlib.import_module(f"tracekit.exercises.judges.{exercise_id}")
    for name, prepare in getattr(judges, "PREPARE", {}).items():
        if name in inputs:
            with trusted():
                prepare(inputs[name])


def truth(exercise_id: str, inputs: dict[str, dict]) -> Future:
    """A future that is done once the judges of this exercise hold the truth for these inputs in their
    caches (judges without a `PREPARE` table compute it when they judge); its error, if any, is the
    judge's to meet again and report."""
    return _POOL.submit(_prepare, exercise_id, inputs)
