"""The program that runs inside a sandbox (`python -I -m tracekit.grading.runner`).

Everything this process does is the student's: their code runs in it, so it can rewrite this
module, the probes, torch, and every line it sends. It is trusted with nothing. It reads one
job (JSON) on stdin, runs the notebook's code cells in order in an IPython shell (magics work,
a per-cell timer interrupts endless cells), exactly as the student wrote them, module-level
state included, and then either

1. runs each measured question's workload (for example `train` for many steps on a large
   batch) and sends its plain values, then waits for the grader's word on its stdin: the grader
   reads the sandbox cgroup's memory high-water mark in between, so how much memory the workload
   needed is never reported by this process; then
2. runs every question's probe on the answers the cells defined and sends the raw observations
   (plain JSON values: losses, gradients, tables, a function's outputs on the drawn inputs).

The values a measured run sends are checked like the probes' (the run that is measured is a run
that is value-checked); a job that has no cgroup to read mid-run measures in a run of its own.

The trusted grader judges every value against truth it computes itself; nothing this process
says is taken as a verdict or a measurement.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from typing import Any

MAX_JOB_BYTES = 64 << 20


def _limits(job: dict) -> None:
    mem = int(job.get("memory_mb", 4096)) << 20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(job.get("file_mb", 64)) << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job.get("own_uid"):  # our uid is this sandbox's alone: the per-uid count is the sandbox's count
        nproc = int(job.get("max_pids", 128))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


class CellTimeout(KeyboardInterrupt):
    """The cell ran longer than the per-cell limit."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise CellTimeout("the cell ran longer than the time limit and was interrupted")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""


def run_cells(job: dict, emit: Any) -> Any:
    """Execute the cells in order; report each cell's error (number, exception, first line)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    signal.signal(signal.SIGALRM, _on_alarm)
    for index, source in job["cells"]:
        emit({"cell": index})
        signal.setitimer(signal.ITIMER_REAL, float(job.get("cell_timeout", 60)))
        try:
            result = shell.run_cell(source, store_history=False, silent=False)
        except BaseException as err:  # noqa: BLE001 - e.g. a timer that fired between cells
            emit({"error": [index, type(err).__name__, _first_line(err)]})
            continue
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        err = result.error_before_exec or result.error_in_exec
        if err is not None:
            emit({"error": [index, type(err).__name__, _first_line(err)]})
    emit({"cells_done": True})
    return shell


def _read_line(fd: int, most: int = 32) -> bytes:
    """One short line from a descriptor, read a byte at a time (nothing beyond it is consumed)."""
    data = bytearray()
    while len(data) < most:
        chunk = os.read(fd, 1)
        if not chunk or chunk == b"\n":
            break
        data += chunk
    return bytes(data)


def _read_job(fd: int) -> dict:
    """The job: its length on a line of its own, then that many bytes of JSON (the descriptor stays
    open: the grader's word after each measured workload comes on it)."""
    size = int(_read_line(fd) or b"0")
    if not 0 < size <= MAX_JOB_BYTES:
        raise SystemExit("no job")
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(1 << 20, size - len(data)))
        if not chunk:
            break
        data += chunk
    return json.loads(bytes(data))


def main() -> None:
    """Read the job, set the limits, run the cells, then the probes or the workload."""
    os.closerange(3, 1 << 16)  # nothing inherited but stdin, stdout and stderr
    job = _read_job(0)
    out, word = os.dup(1), os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.set_inheritable(out, False)
    os.set_inheritable(word, False)
    os.chdir(job.get("workdir") or os.getcwd())
    _limits(job)
    write = os.write

    def emit(obj: dict) -> None:
        data = json.dumps(obj, allow_nan=False, default=str).encode() + b"\n"
        while data:
            data = data[write(out, data):]

    import torch

    import tracekit.exercises as exercises

    torch.set_num_threads(1)
    exercise = exercises.get(job["exercise"])
    shell = run_cells(job, emit)
    limit = float(job.get("probe_timeout", 120))
    by_name = {q.name: q for q in exercise.questions}
    for name, config in job.get("measures") or []:
        emit({"measuring": name})
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            values = exercises.measure_one(by_name[name], shell.user_ns, config)
        except CellTimeout:
            values = {"error": f"the measured run took longer than {limit:g} s"}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        emit({"measured": [name, values]})
        _read_line(word)  # the grader has read the memory high-water mark
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        wanted = set(job.get("questions") or [])
        for q in exercise.questions:
            if q.name in wanted:
                emit({"probing": q.name})
                emit({"observation": [q.name, exercises.probe_one(q, shell.user_ns, job["inputs"][q.name])]})
        emit({"probes_done": True})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
