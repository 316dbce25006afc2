"""Run one submission in sandboxes and bring back only raw observations.

Two sandboxes per notebook, each a fresh `tracekit.grading.runner` process isolated by
`isolation` (own uid, namespaces, cgroup, tmpfs):

1. `run`: all code cells in order (a cell that kills the sandbox or never ends is skipped and
   the notebook run again without it), then the data questions' probes read the answers;
2. `probe`: a fresh interpreter that loads only the answer definitions and probes the code
   questions (a probe that kills the sandbox costs that question only).

Nothing is read from a sandbox but lines on its stdout pipe (size-capped); the cgroup and
the PID namespace are killed as a whole after each run.
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
    tampered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # cells skipped, timeouts, crashes, limits
    cell_errors: list[str] = field(default_factory=list)  # errors raised by the student's cells
    seconds: float = 0.0
    isolation: str = ""
    survivors: int = 0  # processes left after a sandbox was killed (should always be 0)
    failures: list[str] = field(default_factory=list)  # why some answers could not be read at all


@dataclass
class _Outcome:
    lines: list[dict]
    exit: str | None  # why it ended, when it did not end by itself
    oom: bool = False
    survivors: int = 0


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
            nonce: str | None, cell_timeout: float, cpus: float | None = None) -> _Outcome:
    """Start one sandbox, feed it the job, collect its lines, kill it and everything in it. `wall`
    counts the sandbox's own CPU time where its cgroup accounts for it (then wall-clock time is
    capped at WALL_FACTOR times that), else wall-clock seconds."""
    iso = isolation.detect()
    uid, lease = isolation.lease_uid()  # a uid no user and no process has: nothing to sweep before
    try:
        return _launch_as(uid, iso, job, wall, memory_mb=memory_mb, max_pids=max_pids, tmpfs_mb=tmpfs_mb, hide=hide,
                          nonce=nonce, cell_timeout=cell_timeout, cpus=CPUS if cpus is None else cpus)
    finally:
        if lease is not None:
            os.close(lease)


def _launch_as(uid: int, iso: isolation.Isolation, job: dict, wall: float, *, memory_mb: int, max_pids: int,
               tmpfs_mb: int, hide: list[str], nonce: str | None, cell_timeout: float,
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
        prefix = (nonce + " ").encode() if nonce else b""
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
    while proc.poll() is None:
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
    return _Outcome(lines, why, oom, survivors)


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


def run(
    code_cells: list[str],
    exercise_id: str,
    inputs: dict[str, Any],
    nonce: str | None = None,
    timeout: float = 120,
    memory_mb: int = 4096,
    hide: list[str] | None = None,
    cell_timeout: float | None = None,
    max_pids: int = 128,
    tmpfs_mb: int = 256,
) -> SandboxResult:
    """Run the cells, then probe the code answers in a fresh sandbox; observations for every
    question that could be read (the nonce argument is kept for callers; a fresh one is used)."""
    from ..exercises import get

    started = time.monotonic()
    result = SandboxResult(isolation=isolation.detect().describe())
    exercise = get(exercise_id)
    limits = {"memory_mb": memory_mb, "max_pids": max_pids, "tmpfs_mb": tmpfs_mb, "hide": list(hide or []),
              "cell_timeout": cell_timeout or min(60.0, timeout / 2)}
    observations: dict[str, dict] = {}
    # 1. every cell, then the data answers
    data_names = {q.name for q in exercise.questions if q.kind == "data"}
    skipped: set[int] = set()
    data_obs = None
    for _attempt in range(4 if data_names else 0):  # no data question: nothing to run the cells for
        left = timeout - (time.monotonic() - started)
        if left <= 5:
            result.notes.append(f"stopped: the {timeout:.0f} s time limit for this submission ran out")
            result.failures.append(f"the {timeout:.0f} s time limit ran out")
            break
        cells = [[i, src] for i, src in enumerate(code_cells) if i not in skipped]
        out = _launch({"mode": "run", "exercise": exercise_id, "cells": cells, "inputs": inputs}, left,
                      nonce=None, **limits)
        result.survivors += out.survivors
        errors = [x["error"] for x in out.lines if isinstance(x.get("error"), list) and len(x["error"]) == 3]
        result.cell_errors = [f"cell {e[0] + 1}: {e[1]}: {e[2]}"[:300] for e in errors]
        found = next((x["observations"] for x in out.lines if isinstance(x.get("observations"), dict)), None)
        if found is not None:
            data_obs = found
            break
        started_cells = [x["cell"] for x in out.lines if isinstance(x.get("cell"), int)]
        bad = started_cells[-1] if started_cells else None
        why = out.exit or "the notebook stopped before its answers could be read"
        if bad is None or bad in skipped or bad not in range(len(code_cells)):
            result.notes.append(why)
            if data_names:
                result.failures.append(f"the notebook could not be run to its end: {why}")
            break
        skipped.add(bad)
        result.notes.append(f"cell {bad + 1} was skipped: {why}")
    if data_obs is not None:
        observations.update({k: v for k, v in data_obs.items() if k in data_names and isinstance(v, dict)})
    # 2. the code answers, in a fresh interpreter that loads only their definitions
    todo = [q.name for q in exercise.questions if q.kind == "code"]
    cells = [[i, src] for i, src in enumerate(code_cells)]
    dropped = ""
    for _attempt in range(len(todo)):
        if not todo:
            break
        left = timeout - (time.monotonic() - started)
        if left <= 5:
            result.notes.append(f"stopped: the {timeout:.0f} s time limit ran out before checking "
                                + ", ".join(todo))
            result.failures.append(f"the time limit ran out before checking {', '.join(todo)}")
            break
        nonce_now = secrets.token_hex(16)
        out = _launch({"mode": "probe", "exercise": exercise_id, "cells": cells, "inputs": inputs,
                       "questions": todo, "nonce": nonce_now}, left, nonce=nonce_now, **limits)
        result.survivors += out.survivors
        for line in out.lines:
            if isinstance(line.get("tampered"), str) and line["tampered"] not in result.tampered:
                result.tampered.append(line["tampered"])
            if isinstance(line.get("dropped"), list) and line["dropped"]:
                dropped = ", ".join(map(str, line["dropped"][:10]))
            if isinstance(line.get("failed"), list):
                result.notes += [f"loading failed: {f}" for f in line["failed"][:10] if isinstance(f, str)]
            name = line.get("question")
            if name in todo and isinstance(line.get("observation"), dict):
                observations[name] = line["observation"]
                todo.remove(name)
        if not todo:
            break
        probing = [x["probing"] for x in out.lines if x.get("probing") in todo]
        why = out.exit or "the checker stopped"
        if probing:
            observations[probing[-1]] = {"error": f"the sandbox stopped while checking this answer: {why}",
                                         "raised": True}
            result.failures.append(f"{probing[-1]}: the sandbox stopped while checking it ({why})")
            todo.remove(probing[-1])
        else:
            result.notes.append(f"the code answers could not be checked: {why}")
            result.failures.append(f"the code answers could not be checked: {why}")
            break
    if dropped and any("NameError" in str(observations.get(q.name, {}).get("error", ""))
                       for q in exercise.questions if q.kind == "code"):
        result.notes.append("code answers are checked in a fresh interpreter that loads only definitions "
                            "(import, def, class, literal values): a name your answer uses was defined by a "
                            f"statement that runs code ({dropped}); define it with def / class / a literal")
    result.observations = observations if (data_obs is not None or not data_names) or observations else None
    result.seconds = time.monotonic() - started
    return result
