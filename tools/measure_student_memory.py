"""Measure the memory one student needs: run every lesson, and every exercise notebook with its answers
filled in (solutions/, so that its `tk.check` self-check runs every question), each in a fresh kernel,
and sample the kernel's resident memory (RSS) while it runs; a lesson and its exercise side by side need
the sum of the two.

    python tools/measure_student_memory.py            # prints a table, writes deploy/student-memory.json
    python tools/measure_student_memory.py notebooks/07_hooks_offload.ipynb solutions/ex07_hooks.ipynb
    python tools/measure_student_memory.py --update notebooks/10_compiled_residuals.ipynb  # re-measure one
    python tools/measure_student_memory.py --table     # the README's table, from deploy/student-memory.json

The figures in the README's instructor section come from this script (tests/test_student_memory.py
re-measures them, slow).
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


def tree_rss(pid: int) -> int | None:
    """Resident memory (bytes) of a process now, plus what each of its children holds of its own
    (USS: a child caught between fork and exec shares the parent's pages, and its RSS would count
    them twice); None once the process is gone."""
    try:
        root = psutil.Process(pid)
        total = root.memory_info().rss
        children = root.children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            total += child.memory_full_info().uss
        except psutil.Error:  # gone (or not ours to read) meanwhile
            continue
    return total


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
            peak = max(peak, tree_rss(process.pid) or 0)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        client.execute()
    finally:
        done.set()
        watcher.join()
    return peak


def lesson_of(exercise: pathlib.Path) -> str:
    """The lesson notebook's file name that an exercise notebook (exNN_….ipynb) belongs to."""
    sys.path.insert(0, str(ROOT))
    import tracekit.exercises as ex

    return ex.get(exercise.name.split("_", 1)[0]).lesson + ".ipynb"


def pairs(lessons: dict[str, float], exercises: dict[str, float]) -> dict[str, float]:
    """Each lesson with its exercise open beside it: the sum of the two kernels' peaks (MiB)."""
    joined = {}
    for name, peak in exercises.items():
        lesson = lesson_of(pathlib.Path(name))
        if lesson in lessons:
            joined[f"{lesson} + {name}"] = round(lessons[lesson] + peak, 1)
    return joined


def readme_table(measured: dict) -> str:
    """The README's memory table: each lesson, its exercise and the two together (MiB, as measured)."""
    lessons, exercises = measured["peak_kernel_rss_mib"], measured["exercise_peak_kernel_rss_mib"]
    by_lesson = {lesson_of(pathlib.Path(name)): name for name in exercises}
    rows = ["| lesson | its kernel's peak | exercise (answered, self-check run) | its kernel's peak | together |",
            "|---|---|---|---|---|"]
    for lesson, mib in lessons.items():
        exercise = by_lesson.get(lesson)
        if exercise is None:
            rows.append(f"| `{lesson}` | {mib:.0f} MiB | (none) | | {mib:.0f} MiB |")
            continue
        together = measured["lesson_with_exercise_mib"][f"{lesson} + {exercise}"]
        rows.append(f"| `{lesson}` | {mib:.0f} MiB | `{exercise}` | {exercises[exercise]:.0f} MiB "
                    f"| {together:.0f} MiB |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if argv == ["--table"]:
        print(readme_table(json.loads((ROOT / "deploy" / "student-memory.json").read_text())))
        return 0
    update = "--update" in argv
    argv = [a for a in argv if a != "--update"]
    paths = [pathlib.Path(p).resolve() for p in argv] or [
        *sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")), *sorted((ROOT / "solutions").glob("ex*.ipynb"))]
    out = ROOT / "deploy" / "student-memory.json"
    known = json.loads(out.read_text()) if update else {}
    peaks: dict[str, dict[str, float]] = {"notebooks": dict(known.get("peak_kernel_rss_mib", {})),
                                          "solutions": dict(known.get("exercise_peak_kernel_rss_mib", {}))}
    for path in paths:
        mib = round(peak_rss(path) / 2**20, 1)
        peaks["solutions" if path.name.startswith("ex") else "notebooks"][path.name] = mib
        print(f"{path.name:28} peak kernel RSS {mib:7.1f} MiB", flush=True)
    together = pairs(peaks["notebooks"], peaks["solutions"])
    for name, mib in together.items():
        print(f"{name:56} {mib:7.1f} MiB together")
    if argv and not update:  # a selection: print only
        return 0
    out.write_text(json.dumps({
        "measured_with": "python tools/measure_student_memory.py", "torch": torch_version(),
        "peak_kernel_rss_mib": peaks["notebooks"], "max_kernel_rss_mib": max(peaks["notebooks"].values()),
        "exercise_peak_kernel_rss_mib": peaks["solutions"],
        "lesson_with_exercise_mib": together, "max_lesson_with_exercise_mib": max(together.values()),
    }, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
