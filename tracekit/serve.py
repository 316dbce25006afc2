"""Run JupyterLab as a child of `tracekit lab` and stop it, with every kernel it started, when
`tracekit lab` gets SIGTERM, SIGINT (Ctrl-C) or SIGHUP.

JupyterLab runs in a session of its own (a Ctrl-C in the terminal reaches `tracekit lab` only, so
JupyterLab never asks "Shutdown this Jupyter server (y/[n])?"); a stop signal is passed on as SIGTERM,
on which Jupyter shuts its kernels down. Kernels run in sessions of their own too, so whatever of the
server's process tree is still alive a grace period later is ended by process id (Linux: read from
/proc; elsewhere only the server itself is known).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 20.0  # how long Jupyter gets to shut its kernels down before they are ended
POLL_S = 1.0  # how often the process tree is noted while JupyterLab runs


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), to tell it from a later one with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid` (children, their children, …) with its start time; {} without /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        started = _start_time(child)
        if started is not None and child not in found:
            found[child] = started
            todo += children.get(child, [])
    return found


def _alive(pid: int, started: str) -> bool:
    return _start_time(pid) == started


def _end(processes: dict[int, str], sig: int) -> None:
    for pid, started in processes.items():
        if _alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def run_until_stopped(command: list[str], grace: float = GRACE_S) -> int:
    """Run `command` (JupyterLab) until it exits or a stop signal comes; then make sure it and its
    kernels are gone. Returns its exit status, or 128 + the signal's number after a stop signal."""
    process = subprocess.Popen(command, start_new_session=True)
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    known: dict[int, str] = {}
    try:
        while process.poll() is None and not stopping:
            known.update(descendants(process.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(POLL_S)
        if stopping:
            known.update(descendants(process.pid))
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (
                    process.poll() is None or any(_alive(p, s) for p, s in known.items())):
                time.sleep(0.2)
            _end(known, signal.SIGTERM)
            if process.poll() is None:
                process.kill()
            time.sleep(0.5)
            _end(known, signal.SIGKILL)
            process.wait()
            return 128 + stopping[0]
        return process.returncode
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if process.poll() is None:
            process.kill()
            process.wait()
