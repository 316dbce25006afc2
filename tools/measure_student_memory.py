"""Measure the memory one student needs: run every lesson in a fresh kernel and sample the
kernel's resident memory (RSS) while it runs.

    python tools/measure_student_memory.py            # prints a table and the peak

The figure in the README's instructor section comes from this script.
"""

from __future__ import annotations

import json
import pathlib
import sys
import threading

import nbformat
import psutil
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent


def peak_rss(path: pathlib.Path) -> int:
    """Highest RSS (bytes) of the kernel process tree while the notebook runs."""
    book = nbformat.read(path, as_version=4)
    where = {"metadata": {"path": str(path.parent)}}
    client = NotebookClient(book, timeout=300, kernel_name="python3", resources=where)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.05):
            process = getattr(getattr(client.km, "provisioner", None), "process", None)
            if process is None:
                continue
            try:
                root = psutil.Process(process.pid)
                total = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            except psutil.Error:
                continue
            peak = max(peak, total)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        client.execute()
    finally:
        done.set()
        watcher.join()
    return peak


def main() -> int:
    lessons = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    peaks = {}
    for path in lessons:
        peaks[path.name] = peak_rss(path)
        print(f"{path.name:28} peak kernel RSS {peaks[path.name] / 2**20:7.1f} MiB", flush=True)
    print(f"{'all lessons':28} peak kernel RSS {max(peaks.values()) / 2**20:7.1f} MiB")
    out = ROOT / "deploy" / "student-memory.json"
    out.write_text(json.dumps({"measured_with": "python tools/measure_student_memory.py", "torch": torch_version(),
                               "peak_kernel_rss_mib": {k: round(v / 2**20, 1) for k, v in peaks.items()},
                               "max_kernel_rss_mib": round(max(peaks.values()) / 2**20, 1)}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    sys.exit(main())
