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

from . import isolation, resident, zygote

MAX_OUTPUT_BYTES = 16 << 20  # what a sandbox may send back, in total
MAX_LINE_BYTES = 8 << 20
MAX_OUTPUT_LINES = 20_000  # JSON lines a sandbox may send (each cell sends two at most, each question three)
MAX_OUTPUT_ITEMS = 2_000_000  # JSON values in all (counted from the separators of the raw lines)
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
    start: str = ""  # how its sandboxes started: "warm" (forked) or "cold" (a fresh interpreter each)
    timing: dict[str, float] = field(default_factory=dict)  # seconds, summed over its sandboxes (see _Talk.timing)
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
    measured: dict[str, dict] = field(default_factory=dict)  # question -> values + the peak read after its workload
    start: str = ""  # "warm" or "cold"
    timing: dict[str, float] = field(default_factory=dict)  # seconds: start, cells, measure, probes
    refused: str = ""  # the warm path was refused by the kernel (then the run is tried cold)


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
        limits = _Limits(wall, memory_mb, max_pids, tmpfs_mb, list(hide), cell_timeout, CPUS if cpus is None else cpus)
        out = _launch_as(uid, iso, job, limits, warm=_warm_wanted(iso))
        if out.refused == "retry":  # the warm parent was gone (it is restarted on the next call): once more
            out = _launch_as(uid, iso, job, limits, warm=_warm_wanted(iso))
        if out.refused:  # the kernel refused a step of the warm path, or its parent cannot start: cold from now on
            _WARM["refused"] = "the warm parent is gone" if out.refused == "retry" else out.refused
            out = _launch_as(uid, iso, job, limits, warm=False)
        return out
    finally:
        if lease is not None:
            os.close(lease)


@dataclass(frozen=True)
class _Limits:
    wall: float
    memory_mb: int
    max_pids: int
    tmpfs_mb: int
    hide: list[str]
    cell_timeout: float
    cpus: float


_WARM: dict[str, Any] = {}  # "refused": why the kernel refused the warm path (then every run is cold)


def _warm_wanted(iso: isolation.Isolation) -> bool:
    """The warm path needs root (the child mounts and changes uid itself), namespaces and a cgroup
    (memory is measured from the child's own cgroup); TRACEKIT_SANDBOX=cold asks for the cold one."""
    return (iso.full and os.geteuid() == 0 and os.environ.get("TRACEKIT_SANDBOX", "warm") != "cold"
            and not _WARM.get("refused"))


def start_kind() -> str:
    """How this process's sandboxes start now: "warm" (forked from a parent that imported torch
    once) or "cold" (a fresh interpreter per run), with why it is cold where it could be warm."""
    iso = isolation.detect()
    if _warm_wanted(iso):
        return "warm"
    return "cold" + (f" (the warm path was refused: {_WARM['refused']})" if _WARM.get("refused") else "")


def _environment(home: str, namespaces: bool) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "MPLBACKEND": "Agg", "MPLCONFIGDIR": f"{home}/.mpl",
            "IPYTHONDIR": f"{home}/.ipython", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            # large allocations from mmap, given back when freed: the kernel's memory figures follow what is live
            "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072",
            "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "TMPDIR": "/tmp" if namespaces else home}


class _Cold:
    """A sandbox started as a fresh process (bubblewrap, or setpriv where there are no namespaces)."""

    kind = "cold"

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env, start_new_session=True, close_fds=True)
        self.stdin, self.stdout, self.stderr = self.popen.stdin, self.popen.stdout, self.popen.stderr
        self.returncode: int | None = None
        self.maxrss_kib: int | None = None

    def poll(self) -> int | None:
        with contextlib.suppress(ChildProcessError):
            pid, status, usage = os.wait4(self.popen.pid, os.WNOHANG)
            if pid:
                self.returncode = self.popen.returncode = os.waitstatus_to_exitcode(status)
                self.maxrss_kib = usage.ru_maxrss
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.popen.kill()  # bwrap's outer process: --die-with-parent takes the PID namespace's init with it

    def wait(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout)
        if self.returncode is None and self.popen.returncode is not None:
            self.returncode = self.popen.returncode


class _Warm:
    """A sandbox forked from the warm parent (zygote.py), talking over three pipes."""

    kind = "warm"

    def __init__(self, parent: zygote.Zygote, spec: dict) -> None:
        ends = [os.pipe() for _ in range(3)]
        theirs = [ends[0][0], ends[1][1], ends[2][1]]
        try:
            self.child = parent.spawn(spec, *theirs)
        except OSError:
            for r, w in ends:
                os.close(r)
                os.close(w)
            raise
        for fd in theirs:
            os.close(fd)
        self.stdin = os.fdopen(ends[0][1], "wb", buffering=0)
        self.stdout = os.fdopen(ends[1][0], "rb")
        self.stderr = os.fdopen(ends[2][0], "rb")

    @property
    def returncode(self) -> int | None:
        return self.child.returncode

    @property
    def maxrss_kib(self) -> int | None:
        return self.child.maxrss_kib

    def poll(self) -> int | None:
        return self.child.returncode

    def kill(self) -> None:
        self.child.kill()

    def wait(self, timeout: float) -> None:
        self.child.ended.wait(timeout)


def _start(job: dict, iso: isolation.Isolation, group: isolation.Cgroup | None, limits: _Limits, uid: int,
           stage: Path | None, env: dict[str, str], warm: bool) -> _Cold | _Warm:
    """The sandbox's process: forked from the warm parent, or a fresh one."""
    if warm:
        parent = zygote.shared(env)
        if parent is None:
            raise OSError(f"the warm parent did not start ({zygote.last_hello()})")
        spec = {"uid": uid, "procs": group.procs_files if group else [], "tmpfs_bytes": limits.tmpfs_mb << 20,
                "stage": str(stage), "roots": isolation.read_only_roots(), "judges": isolation.hidden_inside_package(),
                "hide": [os.path.normpath(p) for p in limits.hide], "env": env}
        return _Warm(parent, spec)
    package_parent = str(Path(isolation.tracekit.__file__).resolve().parent.parent)  # the grader's own tracekit
    command = [sys.executable, "-I", "-c",
               f"import sys; sys.path.insert(0, {package_parent!r}); from tracekit.grading.runner import main; main()"]
    return _Cold(isolation.launcher(command, iso, group, limits.hide, limits.tmpfs_mb << 20, uid, stage), env)


class _Talk:
    """The threads that feed a sandbox its job and read what it sends: JSON lines (capped in bytes
    and in items), the tail of its stderr; after each measured workload, the memory high-water mark
    of its cgroup, read before the sandbox is told to go on."""

    def __init__(self, proc: _Cold | _Warm, job: dict, group: isolation.Cgroup | None) -> None:
        self.proc, self.job, self.group = proc, job, group
        self.lines: list[dict] = []
        self.measured: dict[str, dict] = {}
        self.expected = {m[0] for m in job.get("measures") or []}
        self.tail = bytearray()
        self.exit_reason: list[str] = []
        self.progress = self.began = time.monotonic()
        self.marks: dict[str, float] = {}
        self.threads = [threading.Thread(target=t, daemon=True) for t in (self._feed, self._read_out, self._read_err)]
        for t in self.threads:
            t.start()

    def _feed(self) -> None:
        data = json.dumps(self.job).encode()
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(f"{len(data)}\n".encode() + data)
            self.proc.stdin.flush()

    def _go_on(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()

    def timing(self, ended: float) -> dict[str, float]:
        """Seconds from the launch to the first cell (start), through the cells, the measured
        workloads and the probes (each phase that happened)."""
        order = [("start", "first"), ("cells", "cells_done"), ("measure", "measured"), ("probes", "probes_done")]
        spans, last = {}, self.began
        for name, mark in order:
            if mark in self.marks:
                spans[name] = round(self.marks[mark] - last, 3)
                last = self.marks[mark]
        spans["end"] = round(ended - last, 3)
        return spans

    def _take(self, item: dict) -> None:
        self.lines.append(item)
        self.progress = time.monotonic()
        self.marks.setdefault("first", self.progress)
        for key in ("cells_done", "probes_done", "measured"):
            if key in item:
                self.marks[key] = self.progress
        entry = item.get("measured")
        if isinstance(entry, list) and len(entry) == 2 and entry[0] in self.expected and entry[0] not in self.measured:
            peak = self.group.memory_peak() if self.group is not None else None
            self.measured[entry[0]] = {"values": entry[1] if isinstance(entry[1], dict) else None,
                                       "peak_bytes": peak, "how": "cgroup" if peak is not None else ""}
            self._go_on()

    def _read_out(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed under it once the sandbox is gone
            self._read_lines()

    def _read_lines(self) -> None:
        total = items = 0
        for raw in iter(lambda: self.proc.stdout.readline(MAX_LINE_BYTES), b""):
            total += len(raw)
            items += 1 + raw.count(b",") + raw.count(b"{") + raw.count(b"[")  # at least its JSON values
            if total > MAX_OUTPUT_BYTES or items > MAX_OUTPUT_ITEMS or len(self.lines) >= MAX_OUTPUT_LINES:
                self.exit_reason.append("it sent more than the grader reads")
                self.proc.kill()
                break
            try:
                item = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(item, dict):
                self._take(item)

    def _read_err(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed under it once the sandbox is gone
            for chunk in iter(lambda: self.proc.stderr.read(65536), b""):
                self.tail.extend(chunk)
                del self.tail[:-4096]

    def close(self) -> None:
        for t in self.threads[1:]:
            t.join(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError, ValueError):
                f.close()


def _place(iso: isolation.Isolation, uid: int) -> tuple[Path | None, str, str]:
    """(scratch folder to remove after, the run's working folder, its HOME)."""
    if iso.namespaces:
        return None, "/tmp/work", "/tmp/home"
    scratch = Path(tempfile.mkdtemp(prefix="tracekit-sandbox-"))
    (scratch / "home").mkdir()
    (scratch / "work").mkdir()
    if os.geteuid() == 0:
        for p in (scratch, scratch / "home", scratch / "work"):
            os.chown(p, uid, uid)
    return scratch, str(scratch / "work"), str(scratch / "home")


def _launch_as(uid: int, iso: isolation.Isolation, job: dict, limits: _Limits, warm: bool) -> _Outcome:
    group = None
    if iso.cgroup:  # this machine gives cgroups: no sandbox runs without one (its limits, its measurement)
        try:
            group = isolation.Cgroup.create(f"tracekit-{os.getpid()}-{uid}-{secrets.token_hex(4)}",
                                            (limits.memory_mb + 64) << 20, limits.max_pids, limits.cpus)
            why = "" if group is not None else "no writable cgroup folder now"
        except OSError as err:
            why = str(err)
        if group is None:
            return _Outcome([], f"the sandbox's cgroup could not be made ({why}): not run")
    scratch, workdir, home = _place(iso, uid)
    # a probe runs the answer several times, on several inputs: at least a minute, or three cells' time
    # where cells get less than 20 s (an answer that never ends then costs 3 cells' time, not a minute)
    probe_timeout = min(max(60.0, limits.cell_timeout), 3 * limits.cell_timeout)
    job = {**job, "workdir": workdir, "memory_mb": limits.memory_mb, "max_pids": limits.max_pids,
           "cell_timeout": limits.cell_timeout, "probe_timeout": probe_timeout, "own_uid": os.geteuid() == 0}
    stage = isolation.new_stage() if iso.namespaces else None
    try:
        proc = _start(job, iso, group, limits, uid, stage, _environment(home, iso.namespaces), warm)
    except OSError as err:
        _cleanup(group, scratch, uid)
        isolation.remove_stage(stage)
        if warm:
            return _Outcome([], None, refused="retry" if isinstance(err, zygote.ParentGone)
                            else f"the warm sandbox could not start ({err})")
        return _Outcome([], f"the sandbox could not start ({err})")
    talk = _Talk(proc, job, group)
    _supervise(proc, talk, group, limits, max(limits.cell_timeout, probe_timeout), uid)
    ended = time.monotonic()
    proc.kill()
    proc.wait(10)
    talk.close()
    oom = bool(group and group.oom_killed())
    peak = group.memory_peak() if group is not None else None
    how = "cgroup" if peak is not None else "rss"
    if peak is None and proc.maxrss_kib is not None:
        peak = proc.maxrss_kib * 1024  # the largest process of the sandbox (Linux reports KiB)
    survivors = _cleanup(group, scratch, uid)
    isolation.remove_stage(stage)
    tail = bytes(talk.tail).decode(errors="replace")
    if warm and not talk.lines and proc.returncode in (95, 96) and "tracekit warm sandbox:" in tail:
        return _Outcome([], None, refused=tail.strip().splitlines()[-1][:300])
    why = _why_it_ended(talk, proc, oom, tail)
    for m in talk.measured.values():
        if m["peak_bytes"] is None and peak is not None:  # no cgroup: the run's own peak (a run of its own)
            m["peak_bytes"], m["how"] = peak, how
    return _Outcome(talk.lines, why, oom, survivors, peak, how, talk.measured, proc.kind, talk.timing(ended))


def _why_it_ended(talk: _Talk, proc: _Cold | _Warm, oom: bool, tail: str) -> str | None:
    why = talk.exit_reason[0] if talk.exit_reason else None
    if why is None and proc.returncode not in (0, None):
        last = tail.strip().splitlines()[-1:]
        code = proc.returncode
        why = "the sandbox was killed" + (f" by signal {-code}" if code < 0 else f" (exit {code})")
        if oom:
            why += ": it used more than its memory limit"
        elif last:
            why += f" ({last[0][:200]})"
    return why


def _supervise(proc: _Cold | _Warm, talk: _Talk, group: isolation.Cgroup | None, limits: _Limits, slowest: float,
               uid: int) -> None:
    """Wait for the sandbox to end, or stop it: CPU or wall time spent, no progress, memory (polled
    where there is no cgroup). Why it was stopped goes to `talk.exit_reason`."""
    wall, started = limits.wall, time.monotonic()
    quiet = slowest + 15  # its own timer should have interrupted it by then
    cpu_at = {"progress": 0.0, "seen": talk.progress}
    polled_memory = group is None and os.geteuid() == 0 and uid != os.getuid()  # its uid is its own
    last_poll = 0.0
    reason = talk.exit_reason
    while proc.poll() is None and not reason:
        now = time.monotonic()
        used = group.cpu_seconds() if group is not None else None
        if talk.progress != cpu_at["seen"]:
            cpu_at["seen"], cpu_at["progress"] = talk.progress, used or 0.0
        if used is not None:  # its own CPU time counts; wall-clock time only as a far cap
            if used > wall:
                reason.append(f"the time limit ran out ({wall:.0f} CPU-seconds)")
            elif used - cpu_at["progress"] > quiet:
                reason.append(f"it ran {quiet - 15:.0f} CPU-seconds without progress")
        if now - started > (wall * WALL_FACTOR if used is not None else wall):
            reason.append(f"the time limit ran out ({now - started:.0f} s)")
        if now - talk.progress > (quiet * WALL_FACTOR if used is not None else quiet):
            reason.append(f"it ran longer than {slowest:.0f} s without progress")
        if polled_memory and now - last_poll > 0.2:
            last_poll = now
            resident = _resident_bytes(uid_processes(uid))
            if resident > limits.memory_mb << 20:
                reason.append(f"the sandbox was killed: it used more than its memory limit "
                              f"({resident >> 20} MB across its processes, --memory {limits.memory_mb})")
        time.sleep(0.05)


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
    """Run the cells (those not skipped), then the job's workloads and probes, in one fresh sandbox.
    A cell that kills the sandbox or never ends is skipped and the notebook run again without it;
    the outcome of the run that got past the cells (None if none did)."""
    resident.keep_libraries_resident()  # no sandbox is charged for reading torch's libraries (resident.py)
    for _attempt in range(4):
        left = timeout - (time.monotonic() - started)
        if left <= 5:
            result.notes.append(f"stopped: the {timeout:.0f} s time limit for this submission ran out")
            result.failures.append(f"the {timeout:.0f} s time limit ran out")
            return None
        cells = [[i, src] for i, src in enumerate(code_cells) if i not in skipped]
        out = _launch({**job, "cells": cells}, left, **limits)
        result.survivors += out.survivors
        result.start = result.start or out.start
        if out.start == "cold" and _WARM.get("refused") and not any(n.startswith("cold start") for n in result.notes):
            result.notes.append(f"cold start: the warm path was refused ({_WARM['refused']})")
        for phase, seconds in out.timing.items():
            result.timing[phase] = round(result.timing.get(phase, 0.0) + seconds, 3)
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


def _measures(exercise: Any, inputs: dict[str, Any]) -> list[list]:
    """[question, workload config] for every question whose criterion is how the answer runs."""
    return [[q.name, inputs[q.name]["measure"]["grade"]] for q in exercise.questions
            if q.measure is not None and isinstance((inputs.get(q.name) or {}).get("measure"), dict)]


def _take_measured(out: _Outcome, measures: list[list], result: SandboxResult) -> None:
    """The workloads this run measured (first report of each wins); one it died in is failed."""
    for name, m in out.measured.items():
        result.measured.setdefault(name, m)
    measuring = [x["measuring"] for x in out.lines if isinstance(x.get("measuring"), str)]
    for name, _ in measures:
        if name not in result.measured and name in measuring:
            result.measured[name] = {"values": None, "peak_bytes": None, "how": ""}
            result.notes.append(f"{name}: the measured run ended without its values ({out.exit or 'no reason'})")
    measures[:] = [m for m in measures if m[0] not in result.measured]


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
    """Run the notebook as written in a fresh sandbox: each measured workload first (the kernel's
    memory high-water mark of the sandbox's cgroup is read right after it, and its values are
    checked like any probe's), then every answer's probe (one that kills the sandbox costs that
    question only). Without a cgroup to read mid-run, each workload runs in a sandbox of its own.
    Raw observations and kernel measurements come back; nothing is judged here."""
    from ..exercises import get

    started = time.monotonic()
    iso = isolation.detect()
    result = SandboxResult(isolation=iso.describe())
    exercise = get(exercise_id)
    limits = {"memory_mb": memory_mb, "max_pids": max_pids, "tmpfs_mb": tmpfs_mb, "hide": list(hide or []),
              "cell_timeout": cell_timeout or min(60.0, timeout / 2)}
    skipped: set[int] = set()
    todo = [q.name for q in exercise.questions]
    measures = _measures(exercise, inputs)
    together = iso.cgroup is not None  # the peak can be read between the workload and the probes
    observations: dict[str, dict] = {}
    ran = False
    while todo:
        job = {"exercise": exercise_id, "inputs": inputs, "questions": todo,
               "measures": measures if together else []}
        out = _run_notebook(job, code_cells, started, timeout, limits, result, skipped)
        if out is None:
            break
        if not ran:
            result.cell_errors = _cell_errors(out.lines)
            ran = True
        if together:
            _take_measured(out, measures, result)
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
            if not measures or not together or not any(x.get("measuring") for x in out.lines):
                result.failures.append(f"the answers could not be checked: {why}")
                break
            continue  # it died in a workload (now failed and left out): the probes run again without it
        observations[probing[-1]] = {"error": f"the sandbox stopped while checking this answer: {why}",
                                     "raised": True}
        result.failures.append(f"{probing[-1]}: the sandbox stopped while checking it ({why})")
        todo.remove(probing[-1])
    if ran:
        result.observations = observations
    else:
        result.failures.append("the notebook could not be run to its end: " + (result.notes[-1] if result.notes
                                                                              else "no answers came back"))
    if not together and ran:
        _measure_apart(exercise_id, code_cells, measures, observations, started, timeout, limits, result, skipped)
    for name, _ in measures:
        result.measured.pop(name, None)  # never measured: the answer is missing or the run did not get there
    result.seconds = time.monotonic() - started
    return result


def _measure_apart(exercise_id: str, code_cells: list[str], measures: list[list], observations: dict[str, dict],
                   started: float, timeout: float, limits: dict, result: SandboxResult, skipped: set[int]) -> None:
    """Without a cgroup: each workload in a sandbox of its own, its peak the run's own."""
    for name, config in list(measures):
        seen = observations.get(name) or {}
        if not seen or {"missing", "error", "checker_error"} & set(seen):
            continue  # nothing to measure: the answer is missing or already failed
        job = {"exercise": exercise_id, "inputs": {}, "questions": [], "measures": [[name, config]]}
        out = _run_notebook(job, code_cells, started, timeout, limits, result, skipped)
        if out is None:
            result.measured[name] = {"values": None, "peak_bytes": None, "how": ""}
            continue
        _take_measured(out, [[name, config]], result)
        result.measured.setdefault(name, {"values": None, "peak_bytes": out.peak_bytes, "how": out.peak_how})
    measures.clear()


def measure_reference(exercise_id: str, question: str, cells: list[str], config: dict, **limits: Any) -> dict:
    """The kernel's memory high-water mark of a sandbox that runs trusted reference cells and the
    question's workload, started the way a submission's sandbox starts (warm or cold): the baseline
    a submission's measurement is compared with."""
    result = SandboxResult()
    lim = {"memory_mb": 4096, "max_pids": 128, "tmpfs_mb": 512, "hide": [], "cell_timeout": 60.0, **limits}
    job = {"exercise": exercise_id, "inputs": {}, "questions": [], "measures": [[question, config]]}
    out = _run_notebook(job, cells, time.monotonic(), 300.0, lim, result, set())
    m = out.measured.get(question) if out else None
    values = (m or {}).get("values")
    if values is None or m is None or m.get("peak_bytes") is None:
        raise RuntimeError(f"the reference workload of {exercise_id} {question} could not be measured: "
                           + "; ".join(result.notes + ([out.exit] if out and out.exit else [])))
    return {"values": values, "peak_bytes": m["peak_bytes"], "how": m["how"], "start": out.start}
