"""The program that runs inside a sandbox (`python -I -m tracekit.grading.runner`).

Everything this process does is the student's: their code runs in it, so it can rewrite this
module, the probes, torch, and every line it sends. It is trusted with nothing. It reads one
job (JSON) on stdin, runs the notebook's code cells in order in an IPython shell (magics work,
a per-cell timer interrupts endless cells), exactly as the student wrote them, module-level
state included, and then either

- `probe`: runs every question's probe on the answers the cells defined and sends the raw
  observations (plain JSON values: losses, gradients, tables, a function's outputs on the
  drawn inputs); or
- `measure`: runs one question's workload (for example `train` for many steps on a large
  batch) and sends its plain values. How much memory the workload needed is not reported by
  this process: the trusted grader reads it from the kernel's accounting of the sandbox's
  cgroup after the sandbox has ended.

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


def main() -> None:
    """Read the job, set the limits, run the cells, then the probes or the workload."""
    os.closerange(3, 1 << 16)  # nothing inherited but stdin, stdout and stderr
    job = json.loads(sys.stdin.buffer.read(MAX_JOB_BYTES))
    out = os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.set_inheritable(out, False)
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
    signal.setitimer(signal.ITIMER_REAL, float(job.get("probe_timeout", 120)))
    try:
        if job["mode"] == "measure":
            question = next(q for q in exercise.questions if q.name == job["question"])
            emit({"measured": exercises.measure_one(question, shell.user_ns, job["config"])})
        else:
            wanted = set(job.get("questions") or [q.name for q in exercise.questions])
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
