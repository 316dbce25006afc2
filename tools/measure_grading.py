"""Measure what a grading container needs: wall time per submission and peak memory of the whole
process tree of `tracekit grade` (the trusted grader plus its sandboxed kernels).

    python tools/measure_grading.py [--jobs 1 2] [--out deploy/grading-memory.json]

The class is the reference solutions, one student each. Wall time depends on what else the
machine runs (the load average is recorded); CPU seconds per submission (summed over the grader
and every process under it, read every 50 ms) do not: divided by the cores a container gets, they
give the wall time on a quiet machine. Memory is sampled every 50 ms with psutil over the grader
and all its descendants:
the peak of the summed RSS (an upper bound: pages of shared libraries count once per process),
the peak of the summed PSS (shared pages divided among the processes that map them: what a
container's memory cgroup comes close to), and the largest single process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def sample_tree(proc: psutil.Popen, peaks: dict, stop: threading.Event) -> None:
    """Record peak summed RSS / PSS and the largest process of `proc` and its descendants."""
    while not stop.is_set():
        try:
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            break
        rss = pss = largest = 0
        for p in procs:
            try:
                info = p.memory_full_info()
            except psutil.Error:
                continue
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
            largest = max(largest, info.rss)
        peaks["rss"] = max(peaks.get("rss", 0), rss)
        peaks["pss"] = max(peaks.get("pss", 0), pss)
        peaks["largest"] = max(peaks.get("largest", 0), largest)
        peaks["processes"] = max(peaks.get("processes", 0), len(procs))
        for p in procs:  # CPU seconds: the last reading of each process seen (a sandbox may be killed, not reaped)
            try:
                times = p.cpu_times()
            except psutil.Error:
                continue
            peaks.setdefault("cpu", {})[p.pid] = times.user + times.system
        stop.wait(0.05)


def measure(jobs: int, solutions: list[Path]) -> dict:
    """Grade the reference class once with --jobs `jobs`; return time and memory figures."""
    with tempfile.TemporaryDirectory(prefix="tracekit-measure-") as tmp:
        subs = Path(tmp) / "subs"
        subs.mkdir()
        for path in solutions:
            shutil.copy(path, subs / f"ref_{path.stem[:4]}.ipynb")
        command = [sys.executable, "-m", "tracekit", "grade", str(subs), "--out", str(Path(tmp) / "out"),
                   "--jobs", str(jobs)]
        peaks: dict = {}
        stop = threading.Event()
        started = time.monotonic()
        proc = psutil.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watcher = threading.Thread(target=sample_tree, args=(proc, peaks, stop), daemon=True)
        watcher.start()
        out, err = proc.communicate()
        wall = time.monotonic() - started
        cpu = sum(peaks.get("cpu", {}).values())
        stop.set()
        watcher.join()
        if proc.returncode != 0:
            raise SystemExit(f"tracekit grade failed:\n{err[-3000:]}")
        reports = [json.loads(p.read_text()) for p in (Path(tmp) / "out").glob("*/report.json")]
    full = sum(1 for r in reports if r["score"] == r["max_score"] > 0)
    short = sorted(f"{r['student']} {r['score']}/{r['max_score']}" for r in reports if r["score"] != r["max_score"])
    load = os.getloadavg()[0]
    mib = 2**20
    return {
        "jobs": jobs, "submissions": len(solutions), "full_marks": full, "not_full": short, "wall_s": round(wall, 1),
        "wall_s_per_submission": round(wall / len(solutions), 2),
        "cpu_s_per_submission": round(cpu / len(solutions), 2),
        "peak_tree_rss_mib": round(peaks["rss"] / mib), "peak_tree_pss_mib": round(peaks["pss"] / mib),
        "peak_process_rss_mib": round(peaks["largest"] / mib), "max_processes": peaks["processes"],
        "load_average_1min_after": round(load, 1),  # other work on the machine slows the wall times
    }


def main() -> None:
    """Measure each --jobs value and write the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default=str(ROOT / "deploy" / "grading-memory.json"))
    args = parser.parse_args()
    solutions = sorted((ROOT / "solutions").glob("ex*.ipynb"))
    runs = []
    for jobs in args.jobs:
        run = measure(jobs, solutions)
        print(json.dumps(run), flush=True)
        runs.append(run)
    import torch

    one = next((r for r in runs if r["jobs"] == 1), runs[0])
    more = [r for r in runs if r["jobs"] > 1]
    per_slot = (max((r["peak_tree_pss_mib"] - one["peak_tree_pss_mib"]) / (r["jobs"] - 1) for r in more)
                if more else None)
    result = {
        "measured_with": "python tools/measure_grading.py " + " ".join(sys.argv[1:]),
        "machine": f"{psutil.cpu_count()} cores, {platform.machine()}, torch {torch.__version__}",
        "runs": runs,
        "grader_and_one_kernel_pss_mib": one["peak_tree_pss_mib"],
        "grader_and_one_kernel_rss_mib": one["peak_tree_rss_mib"],
        "extra_pss_mib_per_jobs_slot": round(per_slot) if per_slot is not None else None,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
