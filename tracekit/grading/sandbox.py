"""Run one submission's code cells in a limited subprocess kernel and collect the
epilogue's observations: the only data that leaves the sandbox."""

from __future__ import annotations

import contextlib
import json
import os
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

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from . import harness

KERNEL_NAME = "tracekit-sandbox"


@dataclass
class SandboxResult:
    """What came back from the sandbox, plus what happened to it."""

    observations: dict[str, dict] | None = None
    tampered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # cells skipped, timeouts, crashes
    cell_errors: list[str] = field(default_factory=list)  # errors raised by the student's cells
    seconds: float = 0.0


def can_isolate() -> bool:
    """True where folders can be hidden from the kernel (root with mount namespaces)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False)
    return done.returncode == 0


def _kernel_spec(folder: Path, memory_mb: int, hide: list[str], isolate: bool) -> KernelSpecManager:
    argv = [sys.executable, "-m", "tracekit.grading.kernel", "--memory-mb", str(memory_mb)]
    for path in hide:
        argv += ["--hide", path]
    argv += ["-f", "{connection_file}"]
    if isolate:
        argv = ["unshare", "--mount", "--propagation", "private", "--", *argv]
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    home = folder / "home"
    home.mkdir()
    env = {"HOME": str(home), "IPYTHONDIR": str(home / ".ipython"), "MPLCONFIGDIR": str(home / ".mpl"),
           "TRACEKIT_SANDBOX_NS": "1" if isolate else "0", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
    (spec_dir / "kernel.json").write_text(json.dumps(
        {"argv": argv, "display_name": "tracekit sandbox", "language": "python", "env": env}))
    return KernelSpecManager(kernel_dirs=[str(folder / "kernels")])


def run(
    code_cells: list[str],
    exercise_id: str,
    inputs: dict[str, Any],
    nonce: str,
    timeout: float = 120,
    memory_mb: int = 4096,
    hide: list[str] | None = None,
    cell_timeout: float | None = None,
) -> SandboxResult:
    """Execute the cells (a kernel per attempt), skipping any cell that kills the kernel or
    never finishes, then the epilogue; return its observations."""
    started = time.monotonic()
    result = SandboxResult()
    skipped: set[int] = set()
    isolate = can_isolate()
    for _attempt in range(4):
        left = timeout - (time.monotonic() - started)
        if left <= 5:
            result.notes.append(f"stopped: the {timeout:.0f} s time limit for this submission ran out")
            break
        cells = [(i, src) for i, src in enumerate(code_cells) if i not in skipped]
        outcome = _attempt_run(cells, exercise_id, inputs, nonce, left, memory_mb, hide or [], isolate,
                               cell_timeout or min(60.0, timeout / 2))
        result.cell_errors = outcome["errors"]
        if outcome["observations"] is not None:
            result.observations = outcome["observations"]
            result.tampered = outcome["tampered"]
            break
        bad = outcome["bad_cell"]
        if bad is None or bad in skipped:
            result.notes.append(outcome["why"])
            break
        skipped.add(bad)
        result.notes.append(f"cell {bad + 1} was skipped: {outcome['why']}")
    result.seconds = time.monotonic() - started
    return result


def _attempt_run(cells: list[tuple[int, str]], exercise_id: str, inputs: dict, nonce: str, wall: float,
                 memory_mb: int, hide: list[str], isolate: bool, cell_timeout: float) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="tracekit-sandbox-"))
    try:
        ksm = _kernel_spec(folder, memory_mb, hide, isolate)
        work = folder / "work"
        work.mkdir()
        book = nbformat.v4.new_notebook()
        book.cells = [nbformat.v4.new_code_cell(harness.preamble())]
        book.cells += [nbformat.v4.new_code_cell(src) for _, src in cells]
        book.cells.append(nbformat.v4.new_code_cell(harness.epilogue(exercise_id, inputs, nonce)))
        km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)  # async: timeouts can fire
        current = {"index": None}

        def on_start(cell: Any = None, cell_index: int | None = None, **_: Any) -> None:
            current["index"] = cell_index

        client = NotebookClient(book, km=km, timeout=cell_timeout, interrupt_on_timeout=True, allow_errors=True,
                                startup_timeout=120, resources={"metadata": {"path": str(work)}},
                                on_cell_start=on_start, record_timing=False)
        expired = threading.Event()

        def watchdog() -> None:
            expired.set()
            _kill(km)

        timer = threading.Timer(wall, watchdog)
        timer.start()
        why = None
        log = (folder / "kernel.log").open("wb")
        try:
            client.execute(stdout=subprocess.DEVNULL, stderr=log)
        except (DeadKernelError, CellTimeoutError, RuntimeError) as err:
            why = "the kernel died" if not expired.is_set() else "the time limit ran out"
            if isinstance(err, CellTimeoutError):
                why = f"it ran longer than {cell_timeout:.0f} s"
        finally:
            log.close()
            timer.cancel()
            _kill(km)  # nbclient shuts the kernel down; make sure nothing is left running
        errors = [f"cell {i + 1}: {out.get('ename')}: {out.get('evalue', '')}"[:300]
                  for (i, _), cell in zip(cells, book.cells[1:-1]) for out in cell.get("outputs", [])
                  if out.get("output_type") == "error"]
        observations, tampered = _read_epilogue(book.cells[-1], nonce)
        broken = [o for o in book.cells[0].get("outputs", []) if o.get("output_type") == "error"]
        if broken:  # the grader's own set-up failed: never grade with weaker checks
            raise RuntimeError(f"sandbox preamble failed: {broken[0].get('ename')}: {broken[0].get('evalue')}")
        bad = None
        if observations is None and current["index"] is not None and 1 <= current["index"] <= len(cells):
            bad = cells[current["index"] - 1][0]
        if observations is None and why is None:
            why = "the checks could not read the answers (the epilogue printed no result)"
        if observations is None and why == "the kernel died":
            tail = (folder / "kernel.log").read_text(errors="replace").strip().splitlines()[-1:]
            why += f" ({tail[0][:200]})" if tail else ""
        return {"observations": observations, "tampered": tampered, "errors": errors, "bad_cell": bad,
                "why": why or ""}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kill(km: AsyncKernelManager) -> None:
    """SIGKILL the kernel process if it is still running."""
    process = getattr(km.provisioner, "process", None) if km.provisioner else None
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGKILL)


def _read_epilogue(cell: Any, nonce: str) -> tuple[dict | None, list[str]]:
    """The observations from the epilogue cell's own stdout, on the line that starts with the nonce."""
    for out in cell.get("outputs", []):
        if out.get("output_type") != "stream" or out.get("name") != "stdout":
            continue
        for line in out.get("text", "").splitlines():
            if line.startswith(nonce + " "):
                try:
                    data = json.loads(line[len(nonce) + 1:])
                except ValueError:
                    return None, []
                obs = data.get("observations")
                if isinstance(obs, dict):
                    return obs, [str(t) for t in data.get("tampered", [])]
    return None, []
