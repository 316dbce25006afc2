"""The trusted side of grading: find submissions, run each in the sandbox, judge the raw
observations against truth computed now, write per-student reports and the class CSV."""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..exercises import draw_inputs, get, judge_all
from . import sandbox
from .submission import SubmissionError, discover, read

REPORT = "report.json"
RESULTS = "results.json"
_TRUSTED_LOCK = threading.Lock()  # the judges compute truth with torch: one at a time keeps it simple


@dataclass(frozen=True)
class Options:
    """Limits for each submission and how the class is split."""

    timeout: float = 120.0  # wall seconds per notebook
    memory_mb: int = 4096  # address-space limit of the sandbox kernel
    jobs: int = 1
    shard: tuple[int, int] = (1, 1)  # (i, n): grade the i-th of n deterministic parts
    hide: tuple[str, ...] = ()  # extra folders the sandbox must not see


def parse_shard(text: str) -> tuple[int, int]:
    """'2/5' -> (2, 5), with a clear error for anything else."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError as err:
        raise ValueError(f"--shard takes i/n, like 2/5, not {text!r}") from err
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: i must be between 1 and n")
    return i, n


def in_shard(student: str, shard: tuple[int, int]) -> bool:
    """Deterministic split by a stable hash of the student's name."""
    i, n = shard
    return zlib.crc32(student.encode()) % n == i - 1


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that readers see the old content or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def grade_notebook(path: Path, student: str, options: Options) -> dict[str, Any]:
    """Grade one notebook: a report entry with per-question scores and what happened."""
    try:
        sub = read(path, student)
    except SubmissionError as err:
        return {"notebook": path.name, "exercise": None, "score": 0, "max_score": 0, "questions": [],
                "problem": str(err)}
    exercise = get(sub.exercise)
    inputs = draw_inputs(exercise)
    nonce = secrets.token_hex(16)
    ran = sandbox.run(sub.code_cells, sub.exercise, inputs, nonce, timeout=options.timeout,
                      memory_mb=options.memory_mb, hide=list(options.hide))
    observations = ran.observations or {}
    with _TRUSTED_LOCK:
        questions = judge_all(exercise, observations, inputs)
    if ran.observations is None:
        for q in questions:
            q["message"] = "not graded: " + ("; ".join(ran.notes) or "the notebook could not be run")
    elif ran.tampered and any(q.kind == "code" for q in exercise.questions):
        note = "your notebook replaced " + ", ".join(ran.tampered) + "; the originals were put back before checking"
        ran.notes.append(note)
    return {
        "notebook": path.name, "exercise": sub.exercise, "title": exercise.title,
        "score": round(sum(q["score"] for q in questions), 2), "max_score": exercise.max_score,
        "questions": questions,
        "sandbox": {"seconds": round(ran.seconds, 2), "notes": ran.notes, "cell_errors": ran.cell_errors,
                    "tampered": ran.tampered},
    }


def grade_student(student: str, notebooks: list[Path], out: Path, options: Options) -> dict[str, Any]:
    """Grade a student's notebooks and write report.json and Gradescope's results.json."""
    started = time.monotonic()
    parts = [grade_notebook(p, student, options) for p in notebooks]
    report = {
        "student": student, "tracekit": __version__, "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "score": round(sum(p["score"] for p in parts), 2), "max_score": sum(p["max_score"] for p in parts),
        "exercises": parts, "seconds": round(time.monotonic() - started, 2),
    }
    folder = out / student
    write_atomic(folder / REPORT, json.dumps(report, indent=2))
    write_atomic(folder / RESULTS, json.dumps(gradescope(report), indent=2))  # written last: marks "done"
    return report


def gradescope(report: dict[str, Any]) -> dict[str, Any]:
    """The report in Gradescope's results.json format."""
    tests = []
    lines = []
    for part in report["exercises"]:
        if part.get("problem"):
            lines.append(f"{part['notebook']}: {part['problem']}")
        for note in part.get("sandbox", {}).get("notes", []):
            lines.append(f"{part['notebook']}: {note}")
        for q in part["questions"]:
            tests.append({
                "name": f"{part['exercise']} {q['name']}: {q['prompt']}", "score": q["score"],
                "max_score": q["max_score"], "output": q["message"], "visibility": "visible",
                "status": "passed" if q["score"] == q["max_score"] else "failed",
            })
    return {"score": report["score"], "max_score": report["max_score"], "tests": tests,
            "output": "\n".join(lines) or "graded by tracekit", "visibility": "visible",
            "execution_time": report["seconds"]}


def grade_all(submissions: Path, out: Path, options: Options,
              progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Grade every student of this shard not graded yet; then rewrite grades.csv from all results."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    if not submissions.is_dir():
        raise FileNotFoundError(f"no such folder: {submissions}")
    by_student: dict[str, list[Path]] = {}
    for student, path in discover(submissions):
        by_student.setdefault(student, []).append(path)
    mine = {s: ps for s, ps in by_student.items() if in_shard(s, options.shard)}
    todo = {s: ps for s, ps in mine.items() if not (out / s / RESULTS).exists()}
    say(f"{len(by_student)} students found; shard {options.shard[0]}/{options.shard[1]}: {len(mine)}; "
        f"already graded: {len(mine) - len(todo)}; to grade: {len(todo)}")
    hide = tuple(str(p) for p in (submissions.resolve(), out.resolve(), *map(Path, options.hide)))
    opts = Options(options.timeout, options.memory_mb, options.jobs, options.shard, hide + _solutions_folders())
    reports = []
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(grade_student, s, ps, out, opts): s for s, ps in sorted(todo.items())}
        for done, future in enumerate(as_completed(futures), 1):
            student = futures[future]
            try:
                report = future.result()
            except Exception as err:  # noqa: BLE001 - one broken submission never stops the batch
                say(f"[{done}/{len(todo)}] {student}: grading failed ({type(err).__name__}: {err}); rerun to retry")
                continue
            reports.append(report)
            score = f"{report['score']:g}/{report['max_score']}"
            say(f"[{done}/{len(todo)}] {student}: {score} ({report['seconds']:.1f} s)")
    write_atomic(out / "grades.csv", grades_csv([out]))
    return reports


def _solutions_folders() -> tuple[str, ...]:
    """The reference solutions next to a source checkout of tracekit: hidden from the sandbox."""
    folder = Path(__file__).resolve().parents[2] / "solutions"
    return (str(folder),) if folder.is_dir() else ()


def grades_csv(result_dirs: list[Path]) -> str:
    """One row per student found in the result folders (merge shards by listing their folders)."""
    rows = []
    for root in result_dirs:
        for report_path in sorted(root.glob(f"*/{REPORT}")):
            report = json.loads(report_path.read_text())
            problems = [p.get("problem") for p in report["exercises"] if p.get("problem")]
            rows.append([report["student"], " ".join(str(p["exercise"]) for p in report["exercises"]),
                         report["score"], report["max_score"], "; ".join(problems)])
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["student", "exercises", "score", "max_score", "problems"])
    writer.writerows(sorted(rows))
    return buf.getvalue()
