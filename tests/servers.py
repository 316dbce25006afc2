"""Helpers for tests that start real servers: free ports, waiting, stopping a process group."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(
    url: str, timeout: float = 90, headers: dict | None = None, process: subprocess.Popen | None = None
) -> dict:
    """Poll a URL until it answers 200 with JSON; fail early if the server process died."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
                return json.loads(r.read() or b"{}")
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError) as err:
            last = err
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout} s ({last})")


def stop(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM the process group, then SIGKILL what is left."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def processes_under(folder: str) -> list[str]:
    """Live processes whose working directory or command line lies in `folder` (to prove that
    nothing was left behind)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().split(") ")[-1][:1]
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if state != "Z" and (folder in cmd or cwd.startswith(folder)):
            found.append(f"{pid} (cwd {cwd}): {cmd[:160]}")
    return found
