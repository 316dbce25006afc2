"""The trusted side of grading: find submissions, run each in its sandboxes, judge the raw
observations against truth computed now, write signed per-student reports and the class CSV.

Nothing a sandbox produces is trusted: it can only send JSON observation lines on a pipe.
Reports are written by this process alone and signed (HMAC, with a key kept in the results
folder); a rerun skips a student only if their report verifies, and the CSV is built only
from reports that verify, with every score clamped to what the exercise definitions allow.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import importlib
import json
import os
import re
import secrets
import stat
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
from ..errors import IsolationError
from ..exercises import IDS, draw_inputs, get, judge_all, student_seed
from . import isolation, sandbox
from .submission import MAX_NOTEBOOK_BYTES, SubmissionError, discover_all, read, read_regular

REPORT = "report.json"
RESULTS = "results.json"
KEY = ".tracekit-key"
CSV_NAME = "grades.csv"
MAX_REPORT_BYTES = 8 << 20
_TRUSTED_LOCK = threading.Lock()  # the judges compute truth with torch: one at a time keeps it simple
_SAFE_FOLDER = re.compile(r"[\w][\w .@+-]{0,99}")
_RESERVED = {CSV_NAME.lower(), KEY, "con", "nul", "canvas.csv", "moodle.csv", "summary.html", "feedback"}  # + gradebook


@dataclass(frozen=True)
class Options:
    """Limits for each submission and how the class is split."""

    timeout: float = 120.0  # wall seconds per notebook
    memory_mb: int = 4096  # memory of the whole sandbox (cgroup) and of each process in it
    jobs: int = 1
    shard: tuple[int, int] = (1, 1)  # (i, n): grade the i-th of n deterministic parts
    hide: tuple[str, ...] = ()  # extra folders the sandbox must not see
    strict: bool = False  # refuse to grade unless namespaces and a cgroup are available
    unsafe: bool = False  # allow grading without namespaces as a non-root user
    max_pids: int = 128  # processes and threads in one sandbox
    tmpfs_mb: int = 256  # the sandbox's only writable space
    max_notebook_mb: int = MAX_NOTEBOOK_BYTES >> 20
    cell_timeout: float | None = None  # seconds before a cell is interrupted (default: min(60, timeout / 2))
    secret: bytes = b""  # the instructor's secret the inputs' seeds derive from (default: the results key)


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


def check_isolation(options: Options) -> isolation.Isolation:
    """What isolation this run gets; IsolationError where the options forbid grading with it."""
    iso = isolation.detect()
    if options.strict and not iso.full:
        raise IsolationError("--strict: this machine cannot isolate submissions fully: " + "; ".join(iso.missing))
    if not iso.namespaces and not iso.root and not options.unsafe:
        raise IsolationError("as a non-root user, tracekit isolates each submission with bubblewrap and user "
                             "namespaces, which do not work here (" + "; ".join(iso.missing) + "). Install "
                             "bubblewrap / allow user namespaces, run as root in a container, or pass --unsafe "
                             "to grade without isolation (a student's code can then read and change your files)")
    return iso


def folder_for(student: str) -> str:
    """The results sub-folder of a student: the name itself when it is a plain one, else a hash."""
    if _SAFE_FOLDER.fullmatch(student) and student.lower() not in _RESERVED and not student.endswith((".", " ")):
        return student
    return "student-" + hashlib.sha256(student.encode()).hexdigest()[:12]


def _move_aside(path: Path, folder: bool = False) -> None:
    """Something that is not a regular file (or, with `folder`, not a real folder) sits where a
    result goes: rename it out of the way."""
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if not (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
            os.rename(path, path.with_name(f"{path.name}.not-a-file-{int(time.time())}-{secrets.token_hex(3)}"))


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that readers see the old content or the new one, never half (never
    through a link planted in its place)."""
    _move_aside(path.parent, folder=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    _move_aside(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _key(out: Path, create: bool) -> bytes | None:
    path = out / KEY
    try:
        return read_regular(path, 1024)
    except SubmissionError:
        if not create:
            return None
    out.mkdir(parents=True, exist_ok=True)
    _move_aside(path)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_regular(path, 1024)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


def _signature(key: bytes, report: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in report.items() if k != "signature"}, sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def load_report(out: Path, folder: str, key: bytes | None) -> dict[str, Any] | None:
    """A student's report if it is a regular file this grader signed (else None)."""
    if key is None:
        return None
    try:
        report = json.loads(read_regular(out / folder / REPORT, MAX_REPORT_BYTES))
    except (SubmissionError, ValueError, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(report, dict) or not isinstance(report.get("signature"), str):
        return None
    if not hmac.compare_digest(report["signature"], _signature(key, report)):
        return None
    return report


def _clamp(value: Any, most: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    if number != number:  # NaN
        return 0.0
    return round(max(0.0, min(float(most), number)), 2)


@functools.lru_cache(maxsize=32)
def _reference_peak(exercise_id: str, question: str, config: str, memory_mb: int, max_pids: int,
                    tmpfs_mb: int) -> int:
    """The kernel's memory high-water mark of the reference answer's measured workload, in a sandbox
    like a submission's (measured once per grading process and configuration)."""
    judges = importlib.import_module(f"tracekit.exercises.judges.{exercise_id}")
    return sandbox.measure_reference(exercise_id, question, judges.reference_cells(question), json.loads(config),
                                     memory_mb=memory_mb, max_pids=max_pids, tmpfs_mb=tmpfs_mb)["peak_bytes"]


def grade_notebook(path: Path, student: str, options: Options, nonce: str | None = None) -> dict[str, Any]:
    """Grade one notebook: a report entry with per-question scores and what happened."""
    try:
        sub = read(path, student, options.max_notebook_mb << 20)
    except SubmissionError as err:
        return {"notebook": path.name, "exercise": None, "score": 0, "max_score": 0, "questions": [],
                "problem": str(err)}
    exercise = get(sub.exercise)
    seed = student_seed(options.secret, sub.exercise, student)
    inputs = draw_inputs(exercise, seed)
    ran = sandbox.run(sub.code_cells, sub.exercise, inputs, timeout=options.timeout,
                      memory_mb=options.memory_mb, hide=list(options.hide), max_pids=options.max_pids,
                      tmpfs_mb=options.tmpfs_mb, cell_timeout=options.cell_timeout)
    observations = ran.observations or {}
    measured: dict[str, dict] = {}
    notes = sub.warnings + ran.notes
    for name, m in ran.measured.items():
        config = inputs[name]["measure"]["grade"]
        try:
            base = _reference_peak(sub.exercise, name, json.dumps(config, sort_keys=True), options.memory_mb,
                                   options.max_pids, options.tmpfs_mb)
        except Exception as err:  # noqa: BLE001 - the grader's own failure: reported, never the student's
            base = None
            notes.append(f"{name}: the reference measurement failed ({type(err).__name__}: {str(err)[:200]})")
        measured[name] = {**m, "reference_peak": base}
    with _TRUSTED_LOCK:
        questions = judge_all(exercise, observations, inputs, measured)
    points = {q.name: q.points for q in exercise.questions}
    for q in questions:
        q["score"] = _clamp(q.get("score"), points.get(q.get("name"), 0))
        if q.get("name") in measured and measured[q["name"]].get("peak_bytes") is not None:
            m = measured[q["name"]]
            q["measured"] = {"peak_bytes": m["peak_bytes"], "reference_peak": m.get("reference_peak"),
                             "how": m.get("how")}
    if ran.observations is None:
        for q in questions:
            q["message"] = "not graded: " + ("; ".join(ran.notes) or "the notebook could not be run")
    if ran.survivors:
        notes.append(f"{ran.survivors} process(es) of the sandbox survived being killed")
    problem = None
    if ran.observations is None or ran.failures:
        problem = "not graded: " + ("; ".join(ran.failures or ran.notes) or "the notebook could not be run")
    part = {
        "notebook": path.name, "exercise": sub.exercise, "title": exercise.title, "seed": seed,
        "score": _clamp(sum(q["score"] for q in questions), exercise.max_score), "max_score": exercise.max_score,
        "questions": questions,
        "sandbox": {"seconds": round(ran.seconds, 2), "notes": notes, "cell_errors": ran.cell_errors,
                    "isolation": ran.isolation},
    }
    if ran.cell_errors:
        part["cell_errors"] = ran.cell_errors
    if problem:
        part["problem"] = problem
    return part


def _shown(name: str) -> str:
    """A file name as text that tells apart names which only look alike."""
    return name if name.isascii() else ascii(name)


def grade_student(student: str, notebooks: list[Path], out: Path, options: Options,
                  problems: list[str] | None = None, key: bytes | None = None) -> dict[str, Any]:
    """Grade a student's notebooks (one per exercise; others reported) and write the signed
    report.json and Gradescope's results.json."""
    started = time.monotonic()
    parts: list[dict[str, Any]] = []
    graded: dict[str, str] = {}
    extra = list(problems or [])
    for path in sorted(notebooks):
        try:
            exercise_id = read(path, student, options.max_notebook_mb << 20).exercise
        except SubmissionError:
            exercise_id = None
        if exercise_id is not None and exercise_id in graded:
            extra.append(f"{_shown(path.name)}: another notebook for {exercise_id} ({_shown(graded[exercise_id])}) "
                         "was graded; one notebook per exercise counts")
            continue
        part = grade_notebook(path, student, options)
        if part.get("exercise"):
            graded[part["exercise"]] = path.name
        parts.append(part)
    report = make_report(student, parts, extra, time.monotonic() - started)
    write_report(out, report, key if key is not None else _key(out, create=True))
    return report


def make_report(student: str, parts: list[dict[str, Any]], problems: list[str], seconds: float,
                complete: bool = True) -> dict[str, Any]:
    """A student's report, with scores clamped to what the exercise definitions allow."""
    ids = [p.get("exercise") for p in parts if p.get("exercise") in IDS]
    most = sum(get(e).max_score for e in ids)
    problems = problems + [f"{p['notebook']}: {p['problem']}" for p in parts if p.get("problem")]
    return {
        "student": student, "folder": folder_for(student), "tracekit": __version__,
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "isolation": isolation.detect().describe(), "complete": complete,
        "score": _clamp(sum(p["score"] for p in parts if p.get("exercise") in IDS), most), "max_score": most,
        "exercises": parts, "problems": problems, "seconds": round(seconds, 2),
    }


def write_report(out: Path, report: dict[str, Any], key: bytes) -> None:
    """Sign and write report.json, then results.json (written last: marks "done")."""
    report["signature"] = _signature(key, report)
    folder = out / report["folder"]
    write_atomic(folder / REPORT, json.dumps(report, indent=2))
    write_atomic(folder / RESULTS, json.dumps(gradescope(report), indent=2))


def gradescope(report: dict[str, Any]) -> dict[str, Any]:
    """The report in Gradescope's results.json format."""
    tests = []
    lines = [] if report.get("isolation", "").startswith("isolation: full") else [report.get("isolation", "")]
    lines += [str(p) for p in report.get("problems", [])]
    for part in report["exercises"]:
        for note in part.get("sandbox", {}).get("notes", []):
            lines.append(f"{part['notebook']}: {note}")
        for q in part["questions"]:
            tests.append({
                "name": f"{part['exercise']} {q['name']}: {q.get('prompt', '')}", "score": q["score"],
                "max_score": q["max_score"], "output": q["message"], "visibility": "visible",
                "status": "passed" if q["score"] == q["max_score"] else "failed",
            })
    return {"score": report["score"], "max_score": report["max_score"], "tests": tests,
            "output": "\n".join(line for line in lines if line) or "graded by tracekit", "visibility": "visible",
            "execution_time": report["seconds"]}


def grade_all(submissions: Path, out: Path, options: Options,
              progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Grade every student of this shard not graded yet; then rewrite grades.csv from all results."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    if not submissions.is_dir():
        raise FileNotFoundError(f"no such folder: {submissions}")
    iso = check_isolation(options)
    say(iso.describe())
    if iso.cgroup:
        isolation.remove_stale_cgroups()
    found = discover_all(submissions)
    mine = sorted(s for s in found.notebooks if in_shard(s, options.shard))
    out.mkdir(parents=True, exist_ok=True)
    key = _key(out, create=True)
    todo = []
    for s in mine:
        done = load_report(out, folder_for(s), key)
        if done is not None and done.get("complete") and done.get("student") == s:
            derived = json.dumps(gradescope(done), indent=2)  # results.json always follows the signed report
            try:
                current = read_regular(out / done["folder"] / RESULTS, MAX_REPORT_BYTES).decode("utf-8")
            except (SubmissionError, UnicodeDecodeError):
                current = None
            if current != derived:
                write_atomic(out / done["folder"] / RESULTS, derived)
        else:
            todo.append(s)
    say(f"{len(found.notebooks)} students found; shard {options.shard[0]}/{options.shard[1]}: {len(mine)}; "
        f"already graded: {len(mine) - len(todo)}; to grade: {len(todo)}")
    hide = tuple(str(p) for p in (submissions.resolve(), out.resolve(), *map(Path, options.hide)))
    opts = Options(**{**options.__dict__, "hide": hide, "secret": options.secret or key})
    reports = []
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(grade_student, s, found.notebooks[s], out, opts, found.problems.get(s), key): s
                   for s in todo}
        for done_count, future in enumerate(as_completed(futures), 1):
            student = futures[future]
            try:
                report = future.result()
            except Exception as err:  # noqa: BLE001 - one broken submission never stops the batch
                why = f"grading failed ({type(err).__name__}: {str(err)[:300]}); rerun to retry"
                report = make_report(student, [], [why, *found.problems.get(student, [])], 0.0, complete=False)
                with contextlib.suppress(OSError):
                    write_report(out, report, key)
                say(f"[{done_count}/{len(todo)}] {student}: {why}")
                reports.append(report)
                continue
            reports.append(report)
            score = f"{report['score']:g}/{report['max_score']}"
            say(f"[{done_count}/{len(todo)}] {student}: {score} ({report['seconds']:.1f} s)")
    from .gradebook import write_from  # grades.csv, canvas.csv, moodle.csv, feedback/, summary.html

    write_from([out], out)
    if not iso.full:
        say(iso.describe())
    return reports


def _cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run as a formula."""
    if isinstance(value, (int, float)):
        return value
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r", "|") else text


def grades_csv(result_dirs: list[Path]) -> str:
    """grades.csv of the students found in the result folders (merge shards by listing their folders):
    only reports this grader signed count, with scores clamped to the exercises' points (gradebook.py)."""
    from .gradebook import grades_text

    return grades_text(result_dirs)
