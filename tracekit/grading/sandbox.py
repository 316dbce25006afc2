"""Run one submission in sandboxes and bring back only raw observations and kernel measurements.

Each sandbox is a fresh `tracekit.grading.runner` process isolated by `isolation` (own uid,
namespaces, cgroup, tmpfs) that runs the notebook's code cells as written (a cell that kills
the sandbox or never ends is skipped and the notebook run again without it), then:

1. `probe`: every question's probe reads the answers (a probe that kills the sandbox costs that
   question only);
2. `measure`, once per question whose criterion is how the answer runs (memory): the question's
   workload, in a sandbox of its own; its memory is the kernel's high-water mark of that
   sandbox's cgroup, read here after the sandbox has ended — nothing inside can change it.

Nothing is read from a sandbox but lines on its stdout pipe (size-capped) and the kernel's
accounting of its cgroup; the cgroup and the PID namespace are killed as a whole after each run.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import isolation

MAX_OUTPUT_BYTES = 16 << 20  # what a sandbox may send back, in total
MAX_LINE_BYTES = 8 << 20
CPUS = 1.0  # CPU quota of one sandbox, in CPUs (where its cgroup has a cpu controller)
WALL_FACTOR = 3.0  # with CPU accounting, a sandbox may take this many times its CPU budget in wall time


@dataclass
class SandboxResult:
    """What came back from the sandboxes, plus what happened to them."""

    observations: dict[str, dict] | None = None
    notes: list[str] = field(default_factory=list)  # cells skipped, timeouts, crashes, limits
    cell_errors: list[str] = field(default_factory=list)  # errors raised by the student's cells
    seconds: float = 0.0
    isolation: str = ""
    survivors: int = 0  # processes left after a sandbox was killed (should always be 0)
    failures: list[str] = field(default_factory=list)  # why some answers could not be read at all
    measured: dict[str, dict] = field(default_factory=dict)  # question -> values + the kernel's peak bytes


@dataclass
class _Outcome:
    lines: list[dict]
    exit: str | None  # why it ended, when it did not end by itself
    oom: bool = False
    survivors: int = 0
    peak_bytes: int | None = None  # the kernel's high-water mark of the sandbox's memory
    peak_how: str = ""  # "cgroup" (everything in the sandbox) or "rss" (its largest process)


def can_isolate() -> bool:
    """True where a sandbox gets its own namespaces (bubblewrap works here)."""
    return isolation.detect().namespaces


def _live(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def uid_processes(uid: int) -> list[int]:
    """Live processes owned by this uid."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and _live(entry):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _sweep_uid(uid: int) -> int:
    """SIGKILL every live process of this sandbox's uid (root only; the uid was free when it was
    leased and is held by this grader, so they are the sandbox's); how many are left after."""
    if os.geteuid() != 0 or uid == os.getuid():
        return 0
    for _ in range(50):
        left = uid_processes(uid)
        if not left:
            return 0
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return len(uid_processes(uid))


def _resident_bytes(pids: list[int]) -> int:
    """Resident memory of these processes, summed (what a grader without a cgroup can measure)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * page
    return total


def _launch(job: dict, wall: float, *, memory_mb: int, max_pids: int, tmpfs_mb: int, hide: list[str],
            cell_timeout: float, cpus: float | None = None) -> _Outcome:
    """Start one sandbox, feed it the job, collect its lines, kill it and everything in it. `wall`
    counts the sandbox's own CPU time where its cgroup accounts for it (then wall-clock time is
    capped at WALL_FACTOR times that), else wall-clock seconds."""
    iso = isolation.detect()
    uid, lease = isolation.lease_uid()  # a uid no user and no process has: nothing to sweep before
    try:
        return _launch_as(uid, iso, job, wall, memory_mb=memory_mb, max_pids=max_pids, tmpfs_mb=tmpfs_mb, hide=hide,
                          cell_timeout=cell_timeout, cpus=CPUS if cpus is None else cpus)
    finally:
        if lease is not None:
            os.close(lease)


def _launch_as(uid: int, iso: isolation.Isolation, job: dict, wall: float, *, memory_mb: int, max_pids: int,
               tmpfs_mb: int, hide: list[str], cell_timeout: float,
               cpus: float = 1.0) -> _Outcome:
    group = None
    if iso.cgroup:
        group = isolation.Cgroup.create(f"tracekit-{os.getpid()}-{uid}-{secrets.token_hex(4)}",
                                        (memory_mb + 64) << 20, max_pids, cpus)
    scratch = None
    if iso.namespaces:
        job = {**job, "workdir": "/tmp/work"}
        home = "/tmp/home"
    else:
        scratch = Path(tempfile.mkdtemp(prefix="tracekit-sandbox-"))
        (scratch / "home").mkdir()
        (scratch / "work").mkdir()
        if os.geteuid() == 0:
            for p in (scratch, scratch / "home", scratch / "work"):
                os.chown(p, uid, uid)
        job = {**job, "workdir": str(scratch / "work")}
        home = str(scratch / "home")
    probe_timeout = max(60.0, cell_timeout)  # a probe runs the answer several times, on several inputs
    job = {**job, "memory_mb": memory_mb, "max_pids": max_pids, "cell_timeout": cell_timeout,
           "probe_timeout": probe_timeout, "own_uid": os.geteuid() == 0}
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "MPLBACKEND": "Agg", "MPLCONFIGDIR": f"{home}/.mpl",
           "IPYTHONDIR": f"{home}/.ipython", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           # large allocations from mmap, given back when freed: the kernel's memory figures follow what is live
           "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072",
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "TMPDIR": "/tmp" if iso.namespaces else home}
    package_parent = str(Path(isolation.tracekit.__file__).resolve().parent.parent)  # the grader's own tracekit
    command = [sys.executable, "-I", "-c",
               f"import sys; sys.path.insert(0, {package_parent!r}); from tracekit.grading.runner import main; main()"]
    stage = isolation.new_stage() if iso.namespaces else None
    argv = isolation.launcher(command, iso, group, hide, tmpfs_mb << 20, uid, stage)
    lines: list[dict] = []
    tail = bytearray()
    exit_reason: list[str] = []
    progress = [time.monotonic()]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True, close_fds=True)
    except OSError as err:
        _cleanup(group, scratch, uid)
        isolation.remove_stage(stage)
        return _Outcome([], f"the sandbox could not start ({err})")

    def feed() -> None:
        with contextlib.suppress(OSError):
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()

    def read_out() -> None:
        total = 0
        prefix = b""
        for raw in iter(lambda: proc.stdout.readline(MAX_LINE_BYTES), b""):
            total += len(raw)
            if total > MAX_OUTPUT_BYTES:
                exit_reason.append("it sent more than the grader reads")
                _kill(proc)
                break
            if not raw.startswith(prefix):
                continue
            try:
                item = json.loads(raw[len(prefix):])
            except (ValueError, RecursionError):
                continue
            if isinstance(item, dict):
                lines.append(item)
                progress[0] = time.monotonic()

    def read_err() -> None:
        for chunk in iter(lambda: proc.stderr.read(65536), b""):
            tail.extend(chunk)
            del tail[:-4096]

    threads = [threading.Thread(target=t, daemon=True) for t in (feed, read_out, read_err)]
    for t in threads:
        t.start()
    started = time.monotonic()
    quiet = max(cell_timeout, probe_timeout) + 15  # its own timer should have interrupted it by then
    cpu_at = {"progress": 0.0, "seen": progress[0]}
    polled_memory = group is None and os.geteuid() == 0 and uid != os.getuid()  # its uid is its own
    last_poll = 0.0
    usage = None  # the kernel's resource usage of the sandbox's process tree, once it is reaped
    while proc.returncode is None:
        with contextlib.suppress(ChildProcessError):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
        now = time.monotonic()
        used = group.cpu_seconds() if group is not None else None
        if progress[0] != cpu_at["seen"]:
            cpu_at["seen"], cpu_at["progress"] = progress[0], used or 0.0
        if used is not None:  # its own CPU time counts; wall-clock time only as a far cap
            if used > wall:
                exit_reason.append(f"the time limit ran out ({wall:.0f} CPU-seconds)")
                break
            if used - cpu_at["progress"] > quiet:
                exit_reason.append(f"it ran {quiet - 15:.0f} CPU-seconds without progress")
                break
        if now - started > (wall * WALL_FACTOR if used is not None else wall):
            exit_reason.append(f"the time limit ran out ({now - started:.0f} s)")
            break
        if now - progress[0] > (quiet * WALL_FACTOR if used is not None else quiet):
            exit_reason.append(f"it ran longer than {max(cell_timeout, probe_timeout):.0f} s without progress")
            break
        if polled_memory and now - last_poll > 0.2:
            last_poll = now
            resident = _resident_bytes(uid_processes(uid))
            if resident > memory_mb << 20:
                exit_reason.append(f"the sandbox was killed: it used more than its memory limit "
                                   f"({resident >> 20} MB across its processes, --memory {memory_mb})")
                break
        time.sleep(0.05)
    _kill(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    for t in threads[1:]:
        t.join(timeout=5)
    oom = bool(group and group.oom_killed())
    peak = group.memory_peak() if group is not None else None
    how = "cgroup" if peak is not None else "rss"
    if peak is None and usage is not None:
        peak = usage.ru_maxrss * 1024  # the largest process of the sandbox (Linux reports KiB)
    survivors = _cleanup(group, scratch, uid)
    isolation.remove_stage(stage)
    why = exit_reason[0] if exit_reason else None
    if why is None and proc.returncode not in (0, None):
        last = bytes(tail).decode(errors="replace").strip().splitlines()[-1:]
        code = proc.returncode
        why = "the sandbox was killed" + (f" by signal {-code}" if code < 0 else f" (exit {code})")
        if oom:
            why += ": it used more than its memory limit"
        elif last:
            why += f" ({last[0][:200]})"
    return _Outcome(lines, why, oom, survivors, peak, how)


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.kill()  # bwrap's outer process: --die-with-parent takes the PID namespace's init with it


def _cleanup(group: isolation.Cgroup | None, scratch: Path | None, uid: int) -> int:
    survivors = 0
    if group is not None:
        if not group.kill_all():
            survivors = len(group.pids())
        group.remove()
    survivors = max(survivors, _sweep_uid(uid))
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    return survivors


def _cell_errors(lines: list[dict]) -> list[str]:
    errors = [x["error"] for x in lines if isinstance(x.get("error"), list) and len(x["error"]) == 3]
    return [f"cell {int(e[0]) + 1}: {str(e[1])[:80]}: {str(e[2])[:200]}" for e in errors
            if isinstance(e[0], int)]


def _run_notebook(job: dict, code_cells: list[str], started: float, timeout: float, limits: dict,
                  result: SandboxResult, skipped: set[int]) -> _Outcome | None:
    """Run the cells (those not skipped), then the job's probes or workload, in one fresh sandbox. A
    cell that kills the sandbox or never ends is skipped and the notebook run again without it; the
    outcome of the run that got past the cells (None if none did)."""
    for _attempt in range(4):
        left = timeout - (time.monotonic() - started)
        if left <= 5:
            result.notes.append(f"stopped: the {timeout:.0f} s time limit for this submission ran out")
            result.failures.append(f"the {timeout:.0f} s time limit ran out")
            return None
        cells = [[i, src] for i, src in enumerate(code_cells) if i not in skipped]
        out = _launch({**job, "cells": cells}, left, **limits)
        result.survivors += out.survivors
        if any(x.get("cells_done") is True for x in out.lines):
            return out
        started_cells = [x["cell"] for x in out.lines if isinstance(x.get("cell"), int)]
        why = out.exit or "the notebook stopped before its answers could be read"
        bad = started_cells[-1] if started_cells else None
        if bad is None or bad in skipped or bad not in range(len(code_cells)):
            result.notes.append(f"the notebook could not be run: {why}")
            return None
        skipped.add(bad)
        result.notes.append(f"cell {bad + 1} was skipped: {why}")
    return None


def run(
    code_cells: list[str],
    exercise_id: str,
    inputs: dict[str, Any],
    timeout: float = 120,
    memory_mb: int = 4096,
    hide: list[str] | None = None,
    cell_timeout: float | None = None,
    max_pids: int = 128,
    tmpfs_mb: int = 512,
) -> SandboxResult:
    """Run the notebook as written and probe every answer in a fresh sandbox (a probe that kills it
    costs that question only), then each measured workload in a fresh sandbox of its own (the
    kernel's memory high-water mark of that sandbox is the measurement). Raw observations and
    kernel measurements come back; nothing is judged here."""
    from ..exercises import get

    started = time.monotonic()
    result = SandboxResult(isolation=isolation.detect().describe())
    exercise = get(exercise_id)
    limits = {"memory_mb": memory_mb, "max_pids": max_pids, "tmpfs_mb": tmpfs_mb, "hide": list(hide or []),
              "cell_timeout": cell_timeout or min(60.0, timeout / 2)}
    skipped: set[int] = set()
    todo = [q.name for q in exercise.questions]
    observations: dict[str, dict] = {}
    ran = False
    while todo:
        out = _run_notebook({"mode": "probe", "exercise": exercise_id, "inputs": inputs, "questions": todo},
                            code_cells, started, timeout, limits, result, skipped)
        if out is None:
            break
        if not ran:
            result.cell_errors = _cell_errors(out.lines)
            ran = True
        for line in out.lines:
            item = line.get("observation")
            if isinstance(item, list) and len(item) == 2 and item[0] in todo and isinstance(item[1], dict):
                observations[item[0]] = item[1]
                todo.remove(item[0])
        if not todo or any(x.get("probes_done") is True for x in out.lines):
            break
        probing = [x["probing"] for x in out.lines if x.get("probing") in todo]
        why = out.exit or "it stopped"
        if not probing:
            result.failures.append(f"the answers could not be checked: {why}")
            break
        observations[probing[-1]] = {"error": f"the sandbox stopped while checking this answer: {why}",
                                     "raised": True}
        result.failures.append(f"{probing[-1]}: the sandbox stopped while checking it ({why})")
        todo.remove(probing[-1])
    if ran:
        result.observations = observations
    else:
        result.failures.append("the notebook could not be run to its end: " + (result.notes[-1] if result.notes
                                                                              else "no answers came back"))
    for q in exercise.questions:
        config = (inputs.get(q.name) or {}).get("measure")
        seen = (result.observations or {}).get(q.name) or {}
        if q.measure is None or not isinstance(config, dict) or not seen or {"missing", "error",
                                                                              "checker_error"} & set(seen):
            continue  # nothing to measure: the answer is missing or already failed
        out = _run_notebook({"mode": "measure", "exercise": exercise_id, "question": q.name,
                             "config": config["grade"]}, code_cells, started, timeout, limits, result, skipped)
        values = next((x["measured"] for x in out.lines if isinstance(x.get("measured"), dict)), None) if out else None
        if out is not None and values is None:
            result.notes.append(f"{q.name}: the measured run ended without its values ({out.exit or 'no reason'})")
        result.measured[q.name] = {"values": values, "peak_bytes": out.peak_bytes if out else None,
                                   "how": out.peak_how if out else ""}
    result.seconds = time.monotonic() - started
    return result


def measure_reference(exercise_id: str, question: str, cells: list[str], config: dict, **limits: Any) -> dict:
    """The kernel's memory high-water mark of a sandbox that runs trusted reference cells and the
    question's workload (the baseline a submission's measurement is compared with)."""
    result = SandboxResult()
    lim = {"memory_mb": 4096, "max_pids": 128, "tmpfs_mb": 512, "hide": [], "cell_timeout": 60.0, **limits}
    out = _run_notebook({"mode": "measure", "exercise": exercise_id, "question": question, "config": config},
                        cells, time.monotonic(), 300.0, lim, result, set())
    values = next((x["measured"] for x in out.lines if isinstance(x.get("measured"), dict)), None) if out else None
    if values is None or out is None or out.peak_bytes is None:
        raise RuntimeError(f"the reference workload of {exercise_id} {question} could not be measured: "
                           + "; ".join(result.notes))
    return {"values": values, "peak_bytes": out.peak_bytes, "how": out.peak_how}
