"""The trusted side of grading: find submissions, run each in its sandboxes, judge the raw
observations against truth computed now, write signed per-student reports and the class CSV.

Nothing a sandbox produces is trusted: it can only send JSON observation lines on a pipe.
Reports are written by this process alone and signed (HMAC, with a key kept in the results
folder); each records the sha256 of every notebook it graded. A rerun keeps a student's report
only if it verifies and her notebooks, the assignment and tracekit are unchanged (`force`
regrades everyone), and the CSV is built only from reports that verify, with every score
clamped to what the exercise definitions allow.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from ..errors import GradesConflictError, IsolationError, JudgesMissingError
from ..exercises import IDS, draw_inputs, get, judge_all
from . import isolation, sandbox
from .submission import MAX_NOTEBOOK_BYTES, Notebook, SubmissionError, discover_all, read, read_regular

REPORT = "report.json"
RESULTS = "results.json"
KEY = ".tracekit-key"
CSV_NAME = "grades.csv"
MANIFEST = "students.json"
MAX_REPORT_BYTES = 8 << 20
MAX_TEXT = 500  # characters of one message, note or error that a report keeps
MAX_ITEMS = 50  # notes, errors or problems of one kind that a report keeps
MAX_NOTEBOOKS = 40  # notebooks of one student that are looked at
_TRUSTED_LOCK = threading.Lock()  # the judges compute truth with torch: one at a time keeps it simple
_PLAIN_FOLDER = re.compile(r"[a-z0-9_][a-z0-9_.@+-]{0,63}")
# names the results folder holds besides students' folders (and names some systems reserve)
RESERVED = {CSV_NAME, KEY, MANIFEST, "summary.html", "feedback", "canvas.csv", "moodle.csv", "gradebook",
            "con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


@dataclass(frozen=True)
class Options:
    """Limits for each submission, what the assignment is, and how the class is split."""

    timeout: float = 120.0  # wall seconds per notebook
    memory_mb: int = 4096  # memory of the whole sandbox (cgroup) and of each process in it
    jobs: int = 1
    shard: tuple[int, int] = (1, 1)  # (i, n): grade the i-th of n deterministic parts
    hide: tuple[str, ...] = ()  # extra folders and files the sandbox must not see (the secret's file among them)
    strict: bool = False  # refuse to grade unless namespaces and a cgroup are available
    unsafe: bool = False  # allow grading without namespaces or a cgroup as a non-root user
    max_pids: int = 128  # processes and threads in one sandbox
    tmpfs_mb: int = 512  # the sandbox's only writable space (ex07 keeps 288 MiB of graphs alive: a disk store must fit)
    max_notebook_mb: int = MAX_NOTEBOOK_BYTES >> 20
    cell_timeout: float | None = None  # seconds before a cell is interrupted (default: min(60, timeout / 2))
    exercises: tuple[str, ...] | None = None  # the assignment (None: whatever each student submitted)
    force: bool = False  # regrade everyone, changed or not
    layout: str = "auto"  # "flat", "nbgrader" or "auto" (nbgrader only when the whole tree is one)
    secret: bytes | None = None  # the instructor's secret inputs are drawn from (default: the results key)


def content_digest(code_cells: list[str]) -> str:
    """The sha256 of a notebook's code cells' sources (what the grade is a function of: outputs,
    metadata and markdown do not change it)."""
    h = hashlib.sha256()
    for src in code_cells:
        data = src.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def student_seed(secret: bytes, exercise_id: str, student: str, content: str = "") -> int:
    """The seed a submission's inputs for an exercise are drawn from: HMAC-SHA256 of the exercise,
    the student's name and the digest of the notebook's code (`content_digest`) under the instructor's
    secret, as a 63-bit integer: the same notebook draws the same inputs on every rerun, any change to
    its code draws new ones (so a table fitted to one submission's feedback misses the next), and no
    one can compute them without the secret."""
    message = f"tracekit-seed\0{exercise_id}\0{student}\0{content}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hmac.new(secret, message, hashlib.sha256).digest()[:8], "big") >> 1


def parse_exercises(text: str | None) -> tuple[str, ...] | None:
    """'ex01,ex03' -> ('ex01', 'ex03'); None or '' -> None (no assignment); unknown ids raise ValueError."""
    if not text:
        return None
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [e for e in chosen if e not in IDS]
    if unknown or not chosen:
        raise ValueError(f"--exercises takes ids like ex01,ex03 (from {', '.join(IDS)}), not {text!r}")
    return tuple(sorted(chosen))


def read_secret(path: Path) -> bytes:
    """The instructor's secret from a file (at least 16 bytes; surrounding whitespace dropped)."""
    data = read_regular(Path(path), 4096).strip()
    if os.stat(path).st_nlink > 1:  # hidden from the sandboxes by its path: another name would show it
        raise SubmissionError(f"{path}: the secret's file has other hard links; copy it to a file of its own")
    if len(data) < 16:
        raise SubmissionError(f"{path}: a secret needs at least 16 bytes (e.g. `head -c 32 /dev/urandom > {path}`)")
    return data


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
    return zlib.crc32(student.encode("utf-8", "surrogatepass")) % n == i - 1


def require_judges() -> None:
    """JudgesMissingError unless this install holds the judges (a student's install does not)."""
    from ..exercises import sealed

    if not sealed.judges_here():
        raise JudgesMissingError("grading needs the instructor's judges (tracekit/exercises/judges/), which a "
                                 "student's install of tracekit does not carry: grade from a source checkout "
                                 "of tracekit (`pip install -e .`); in a notebook, tk.check(\"exNN\") checks "
                                 "against the self-check's sealed key")


def check_isolation(options: Options) -> isolation.Isolation:
    """What isolation this run gets; IsolationError where the options forbid grading with it."""
    iso = isolation.detect()
    if options.strict and not iso.full:
        raise IsolationError("--strict: this machine cannot isolate submissions fully: " + "; ".join(iso.missing))
    if not iso.root and not options.unsafe:
        if not iso.namespaces:
            raise IsolationError("as a non-root user, tracekit isolates each submission with bubblewrap and user "
                                 "namespaces, which do not work here (" + "; ".join(iso.missing) + "). Install "
                                 "bubblewrap / allow user namespaces, run as root in a container, or pass --unsafe "
                                 "to grade without isolation (a student's code can then read and change your files)")
        if iso.cgroup is None:
            raise IsolationError("as a non-root user without a cgroup, nothing limits a sandbox's processes or its "
                                 "memory as a whole (RLIMIT_NPROC counts every process of your uid, RLIMIT_AS one "
                                 "process at a time). Delegate a cgroup with the memory and pids controllers "
                                 "(e.g. `systemd-run --user --scope -p Delegate=yes tracekit grade ...`), run as "
                                 "root (a container is fine), or pass --unsafe to grade without those limits")
    return iso


def folder_for(student: str) -> str:
    """The results sub-folder of a student: the name itself when it is a plain lower-case one, else
    `~` (which no plain name starts with), a readable part and a hash of the exact name."""
    if _PLAIN_FOLDER.fullmatch(student) and student not in RESERVED and not student.endswith("."):
        return student
    slug = re.sub(r"[^a-z0-9_.@+-]+", "-", student.lower()).strip("-.")[:32] or "student"
    return f"~{slug}-" + hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()[:16]


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
                    tmpfs_mb: int, start: str) -> int:
    """The kernel's memory high-water mark of the reference answer's measured workload, in a sandbox
    like a submission's (measured once per grading process, workload size and way of starting a
    sandbox, warm or cold, so that both sides carry the same inheritance: the memory depends on the
    sizes, not on the values a student's seed draws, so the reference runs with seed 0)."""
    judges = importlib.import_module(f"tracekit.exercises.judges.{exercise_id}")
    done = sandbox.measure_reference(exercise_id, question, judges.reference_cells(question), json.loads(config),
                                     memory_mb=memory_mb, max_pids=max_pids, tmpfs_mb=tmpfs_mb)
    if done["start"] != start:
        raise RuntimeError(f"the reference ran {done['start']}, the submission {start}: not comparable")
    return done["peak_bytes"]


def grade_notebook(path: Path, student: str, options: Options) -> dict[str, Any]:
    """Grade one notebook: a report entry with per-question scores and what happened."""
    try:
        sub = read(path, student, options.max_notebook_mb << 20)
    except SubmissionError as err:
        return {"notebook": path.name, "exercise": None, "score": 0, "max_score": 0, "questions": [],
                "problem": str(err)}
    exercise = get(sub.exercise)
    seed = student_seed(options.secret or b"", sub.exercise, student, content_digest(sub.code_cells))
    inputs = draw_inputs(exercise, seed)
    ran = sandbox.run(sub.code_cells, sub.exercise, inputs, timeout=options.timeout,
                      memory_mb=options.memory_mb, hide=list(options.hide), max_pids=options.max_pids,
                      tmpfs_mb=options.tmpfs_mb, cell_timeout=options.cell_timeout)
    observations = ran.observations or {}
    measured: dict[str, dict] = {}
    notes = sub.warnings + ran.notes
    timing = {**ran.timing}
    began = time.monotonic()
    for name, m in ran.measured.items():
        sizes = {**inputs[name]["measure"]["grade"], "seed": 0}
        try:
            base = _reference_peak(sub.exercise, name, json.dumps(sizes, sort_keys=True), options.memory_mb,
                                   options.max_pids, options.tmpfs_mb, ran.start)
        except Exception as err:  # noqa: BLE001 - the grader's own failure: reported, never the student's
            base = None
            notes.append(f"{name}: the reference measurement failed ({type(err).__name__}: {str(err)[:200]})")
        measured[name] = {**m, "reference_peak": base}
    timing["reference"] = round(time.monotonic() - began, 3)
    began = time.monotonic()
    with _TRUSTED_LOCK:
        questions = judge_all(exercise, observations, inputs, measured)
    timing["judge"] = round(time.monotonic() - began, 3)
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
                    "isolation": ran.isolation, "start": ran.start, "timing": timing},
    }
    if ran.cell_errors:
        part["cell_errors"] = ran.cell_errors
    if problem:
        part["problem"] = problem
    return part


def _shown(name: str) -> str:
    """A file name as text that tells apart names which only look alike."""
    return name if name.isascii() else ascii(name)


def _text(value: Any, most: int = MAX_TEXT) -> str:
    text = str(value)
    return text if len(text) <= most else text[:most] + f"… [{len(text) - most} more characters]"


def _texts(values: Any, most: int = MAX_ITEMS) -> list[str]:
    items = [_text(v) for v in (values if isinstance(values, list) else [])[:most]]
    if isinstance(values, list) and len(values) > most:
        items.append(f"… and {len(values) - most} more")
    return items


def _bounded(part: dict[str, Any]) -> dict[str, Any]:
    """A part as a report keeps it: every text from the sandbox or the judge cut to size, so no
    output of a student's can make a report too big to verify."""
    part = dict(part)
    part["questions"] = [{**q, "message": _text(q.get("message", ""), 4 * MAX_TEXT)}
                         for q in part.get("questions", [])[:MAX_ITEMS] if isinstance(q, dict)]
    if part.get("problem"):
        part["problem"] = _text(part["problem"], 2 * MAX_TEXT)
    box = part.get("sandbox")
    if isinstance(box, dict):
        part["sandbox"] = {**box, "notes": _texts(box.get("notes")), "cell_errors": _texts(box.get("cell_errors")),
                           "tampered": _texts(box.get("tampered"), 10)}
    return part


def not_submitted(exercise_id: str) -> dict[str, Any]:
    """The part of an assigned exercise no notebook was found for: every question 0."""
    exercise = get(exercise_id)
    questions = [{"name": q.name, "prompt": q.prompt, "score": 0.0, "max_score": q.points,
                  "message": "not submitted", "status": "not submitted"} for q in exercise.questions]
    return {"notebook": None, "exercise": exercise_id, "title": exercise.title, "score": 0.0,
            "max_score": exercise.max_score, "questions": questions, "status": "not submitted",
            "problem": "not submitted: no notebook for this exercise was found"}


def grade_student(student: str, notebooks: list[Notebook | Path], out: Path, options: Options,
                  problems: list[str] | None = None, key: bytes | None = None,
                  submission: dict[str, Any] | None = None, reason: str | None = None) -> dict[str, Any]:
    """Grade a student's notebooks (one per exercise of the assignment; others reported, not graded;
    an assigned exercise without a notebook scores 0) and write the signed report.json and
    Gradescope's results.json."""
    started = time.monotonic()
    parts: list[dict[str, Any]] = []
    graded: dict[str, str] = {}
    extra = list(problems or [])
    assigned = options.exercises
    chosen = sorted(notebooks, key=lambda nb: nb.shown if isinstance(nb, Notebook) else str(nb))
    if len(chosen) > MAX_NOTEBOOKS:
        extra.append(f"{len(chosen)} notebooks were submitted: only the first {MAX_NOTEBOOKS} were looked at")
        chosen = chosen[:MAX_NOTEBOOKS]
    for path in chosen:
        shown = path.shown if isinstance(path, Notebook) else path.name
        try:
            exercise_id = read(path, student, options.max_notebook_mb << 20).exercise
        except SubmissionError:
            exercise_id = None
        if exercise_id is not None and assigned is not None and exercise_id not in assigned:
            extra.append(f"{shown}: {exercise_id} is not part of this assignment (it grades {', '.join(assigned)}): "
                         "not graded")
            continue
        if exercise_id is not None and exercise_id in graded:
            extra.append(f"{_shown(shown)}: another notebook for {exercise_id} ({_shown(graded[exercise_id])}) "
                         "was graded; one notebook per exercise counts")
            continue
        part = grade_notebook(path, student, options)
        part["notebook"] = shown
        if isinstance(path, Notebook):
            part["sha256"] = path.sha256
        if part.get("exercise"):
            graded[part["exercise"]] = shown
        parts.append(part)
    for exercise_id in assigned or ():
        if exercise_id not in graded:
            parts.append(not_submitted(exercise_id))
    report = make_report(student, parts, extra, time.monotonic() - started, assigned=assigned,
                         submission=submission, shard=options.shard, reason=reason)
    write_report(out, report, key if key is not None else _key(out, create=True))
    return report


def outcomes(part: dict[str, Any]) -> list[str]:
    """Everything that happened to one notebook that a student or instructor must be told: why it
    was not graded, each cell error (cell, exception, first line), timeouts, skipped cells, notes."""
    where = part.get("notebook") or part.get("exercise") or "?"
    lines = [f"{where}: {part['problem']}"] if part.get("problem") else []
    box = part.get("sandbox") if isinstance(part.get("sandbox"), dict) else {}
    lines += [f"{where}: {e}" for e in box.get("cell_errors", [])]
    lines += [f"{where}: {n}" for n in box.get("notes", [])]
    return lines


def make_report(student: str, parts: list[dict[str, Any]], problems: list[str], seconds: float,
                complete: bool = True, assigned: tuple[str, ...] | None = None,
                submission: dict[str, Any] | None = None, shard: tuple[int, int] | None = None,
                reason: str | None = None) -> dict[str, Any]:
    """A student's report, with scores clamped to what the exercise definitions allow and every
    text from a sandbox cut to size."""
    parts = [_bounded(p) for p in parts]
    ids = list(assigned) if assigned is not None else [p.get("exercise") for p in parts if p.get("exercise") in IDS]
    most = sum(get(e).max_score for e in ids)
    counted = [p for p in parts if p.get("exercise") in ids]
    named = list(problems) + [line for p in parts for line in outcomes(p)]
    return {
        "student": student, "folder": folder_for(student), "tracekit": __version__,
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "isolation": isolation.detect().describe(), "complete": complete,
        "assigned": list(assigned) if assigned is not None else None,
        "score": _clamp(sum(_clamp(p.get("score"), get(p["exercise"]).max_score) for p in counted), most),
        "max_score": most, "exercises": parts, "problems": _texts(named, 4 * MAX_ITEMS),
        "seconds": round(seconds, 2), "submission": submission, "shard": list(shard) if shard else None,
        "regraded": reason,
    }


def write_report(out: Path, report: dict[str, Any], key: bytes) -> None:
    """Sign and write report.json, then results.json (written last: marks "done")."""
    report["signature"] = _signature(key, report)
    folder = out / report["folder"]
    write_atomic(folder / REPORT, json.dumps(report, indent=2))
    write_atomic(folder / RESULTS, json.dumps(gradescope(report), indent=2))


def gradescope(report: dict[str, Any]) -> dict[str, Any]:
    """The report in Gradescope's results.json format (its `output` names every outcome)."""
    tests = []
    lines = [] if report.get("isolation", "").startswith("isolation: full") else [report.get("isolation", "")]
    lines += [str(p) for p in report.get("problems", [])]
    for part in report["exercises"]:
        for q in part["questions"]:
            tests.append({
                "name": f"{part['exercise']} {q['name']}: {q.get('prompt', '')}", "score": q["score"],
                "max_score": q["max_score"], "output": q["message"], "output_format": "text",
                "visibility": "visible",
                "status": "passed" if q["score"] == q["max_score"] else "failed",
            })
    return {"score": report["score"], "max_score": report["max_score"], "tests": tests,
            "output": "\n".join(line for line in lines if line) or "graded by tracekit", "visibility": "visible",
            "output_format": "text", "test_output_format": "text",  # student text shown as text: no link, no HTML
            "execution_time": report["seconds"]}


def _fingerprint(notebooks: list[Notebook], problems: list[str]) -> dict[str, Any]:
    """What a report was graded from: each notebook's sha256, and what discovery could not take."""
    return {"notebooks": {nb.shown: nb.sha256 for nb in notebooks}, "found": sorted(problems)}


def _why_regrade(done: dict[str, Any] | None, student: str, now: dict[str, Any], options: Options,
                 planted: bool) -> str | None:
    """None when the report on file still holds; else why this student is graded (again)."""
    if options.force:
        return "--force"
    if done is None:
        return "its report does not verify" if planted else "new"
    if done.get("student") != student:
        return "new"
    if not done.get("complete"):
        return "its last grading did not finish"
    before = done.get("submission") if isinstance(done.get("submission"), dict) else {}
    if before.get("notebooks") != now["notebooks"]:
        old = before.get("notebooks") if isinstance(before.get("notebooks"), dict) else {}
        changed = sorted(n for n in set(old) | set(now["notebooks"]) if old.get(n) != now["notebooks"].get(n))
        return "changed: " + ", ".join(changed[:5]) + (" …" if len(changed) > 5 else "")
    if before.get("found") != now["found"]:
        return "changed: what was submitted besides the notebooks"
    if done.get("assigned") != (list(options.exercises) if options.exercises is not None else None):
        return "the assignment changed"
    if done.get("tracekit") != __version__:
        return f"graded by tracekit {done.get('tracekit')}"
    return None


def _manifest(out: Path, students: list[str]) -> None:
    """results/students.json: which folder holds which student (a folder never changes hands)."""
    try:
        known = json.loads(read_regular(out / MANIFEST, MAX_REPORT_BYTES))
        known = known if isinstance(known, dict) else {}
    except (SubmissionError, ValueError, RecursionError, UnicodeDecodeError):
        known = {}
    for student in students:
        folder = folder_for(student)
        if known.get(folder, student) != student:
            raise GradesConflictError(f"results folder {folder} belongs to {known[folder]!r}, not {student!r} "
                                      f"(see {out / MANIFEST}): grade into a fresh results folder")
        known[folder] = student
    write_atomic(out / MANIFEST, json.dumps(dict(sorted(known.items())), indent=2, ensure_ascii=False))


def grade_all(submissions: Path, out: Path, options: Options,
              progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Grade every student of this shard whose report is missing, does not verify, or was graded
    from other notebooks (or everyone, with `force`); then rewrite grades.csv from all results.
    `submissions` is a folder of submissions or one notebook."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    found = discover_all(Path(submissions), options.layout, options.max_notebook_mb << 20)
    try:
        return _grade_found(found, Path(submissions), out, options, say)
    finally:
        found.close()


def _grade_found(found: Any, submissions: Path, out: Path, options: Options,
                 say: Callable[[str], None]) -> list[dict[str, Any]]:
    if not found.notebooks:
        passed = f" (passed over: {'; '.join(found.ignored[:3])})" if found.ignored else ""
        raise SubmissionError(f"no submissions in {submissions}: it should hold <student>.ipynb files or "
                              f"<student>/ folders (or nbgrader's submitted/<student>/<assignment>/){passed}")
    require_judges()
    iso = check_isolation(options)
    say(iso.describe())
    if iso.cgroup:
        isolation.remove_stale_cgroups()
    mine = sorted(s for s in found.notebooks if in_shard(s, options.shard))
    out.mkdir(parents=True, exist_ok=True)
    key = _key(out, create=True)
    _manifest(out, sorted(found.notebooks))
    existing: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(out):
            if entry.is_dir(follow_symlinks=False):
                report = load_report(out, entry.name, key)
                if report is not None:
                    existing[entry.name] = report
    todo: list[tuple[str, str, dict[str, Any]]] = []
    kept = 0
    for s in mine:
        now = _fingerprint(found.notebooks[s], found.problems.get(s, []))
        folder = folder_for(s)
        done = existing.get(folder)
        planted = (out / folder / REPORT).exists() or (out / folder / RESULTS).exists()
        why = _why_regrade(done, s, now, options, planted)
        if why is None:
            kept += 1
            derived = json.dumps(gradescope(done), indent=2)  # results.json always follows the signed report
            try:
                current = read_regular(out / folder / RESULTS, MAX_REPORT_BYTES).decode("utf-8")
            except (SubmissionError, UnicodeDecodeError):
                current = None
            if current != derived:
                write_atomic(out / folder / RESULTS, derived)
        else:
            todo.append((s, why, now))
    say(f"{len(found.notebooks)} students found ({found.layout} layout); shard {options.shard[0]}/{options.shard[1]}: "
        f"{len(mine)}; already graded: {kept} (unchanged, kept); to grade: {len(todo)}")
    if found.layout == "flat" and "submitted" in found.notebooks and options.layout == "auto":
        say("note: submitted/ is graded as a student's folder (for nbgrader's layout pass --layout nbgrader)")
    for line in found.ignored[:20]:
        say(f"passed over: {line}")
    for s, why, _ in todo:
        if why != "new":
            say(f"regrading {s}: {why}")
    counts = {tuple(r["shard"]) for r in existing.values() if isinstance(r.get("shard"), list)}
    if any(n != options.shard[1] for _, n in counts):
        say(f"WARNING: {out} holds results of a run with another shard count "
            f"({', '.join(sorted({str(n) for _, n in counts}))}; this run: {options.shard[1]}): students may be "
            "listed twice; grade into fresh results folders, or `tracekit grades` will refuse conflicting scores")
    folder = submissions if submissions.is_dir() else submissions.parent  # one notebook: its folder
    hide = tuple(str(p) for p in (folder.resolve(), out.resolve(), *map(Path, options.hide)))
    opts = dataclasses.replace(options, hide=hide, secret=options.secret or key)
    reports = []
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(grade_student, s, found.notebooks[s], out, opts, found.problems.get(s), key, now,
                               why): s for s, why, now in todo}
        for done_count, future in enumerate(as_completed(futures), 1):
            student = futures[future]
            try:
                report = future.result()
            except Exception as err:  # noqa: BLE001 - one broken submission never stops the batch
                why = f"grading failed ({type(err).__name__}: {str(err)[:300]}); rerun to retry"
                report = make_report(student, [], [why, *found.problems.get(student, [])], 0.0, complete=False,
                                     assigned=options.exercises, shard=options.shard)
                with contextlib.suppress(OSError):
                    write_report(out, report, key)
                say(f"[{done_count}/{len(todo)}] {student}: {why}")
                reports.append(report)
                continue
            reports.append(report)
            score = f"{report['score']:g}/{report['max_score']}"
            say(f"[{done_count}/{len(todo)}] {student}: {score} ({report['seconds']:.1f} s)")
    load_reports([out], warn=say)  # refuses students graded twice with different scores, warns on shards
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


@dataclass
class Loaded:
    """One student's results as found in a results folder (report None: not one this grader signed)."""

    root: Path
    folder: str
    report: dict[str, Any] | None


def _points(report: dict[str, Any]) -> tuple[float, float]:
    parts = [p for p in report.get("exercises", []) if isinstance(p, dict)]
    assigned = report.get("assigned")
    ids = assigned if isinstance(assigned, list) else [p.get("exercise") for p in parts]
    most = sum(get(e).max_score for e in ids if e in IDS)
    return _clamp(report.get("score"), most), float(most)


def load_reports(result_dirs: list[Path], warn: Callable[[str], None] | None = None) -> list[Loaded]:
    """Every student's results from these folders (e.g. one per shard), once each. A student found
    in several with the same score is listed once (the latest); with different scores it is a
    GradesConflictError. Results from runs with different shard counts are warned about."""
    say = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    by_student: dict[str, list[Loaded]] = {}
    unsigned: list[Loaded] = []
    counts: set[int] = set()
    for root in result_dirs:
        key = _key(root, create=False)
        try:
            folders = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for folder in folders:
            report = load_report(root, folder, key)
            if report is None:
                if (root / folder / REPORT).exists() or (root / folder / RESULTS).exists():
                    unsigned.append(Loaded(root, folder, None))
                continue
            if isinstance(report.get("shard"), list) and len(report["shard"]) == 2:
                counts.add(report["shard"][1])
            by_student.setdefault(str(report.get("student")), []).append(Loaded(root, folder, report))
    if len(counts) > 1:
        shown = ", ".join(map(str, sorted(counts)))
        say(f"WARNING: these results come from runs with different shard counts ({shown})")
    loaded = []
    for student, found in by_student.items():
        scores = {_points(f.report) for f in found}
        if len(scores) > 1:
            where = "; ".join(f"{f.root / f.folder}: {_points(f.report)[0]:g}/{_points(f.report)[1]:g}" for f in found)
            raise GradesConflictError(f"{student!r} is graded more than once with different scores ({where}): "
                                      "keep the results folder of the latest run (a rerun with another --shard count "
                                      "leaves the old ones behind) and merge again")
        if len(found) > 1:
            say(f"note: {student!r} is in {len(found)} results folders with the same score: listed once")
        loaded.append(max(found, key=lambda f: str(f.report.get("graded_at"))))
    return sorted(loaded + unsigned, key=lambda f: (str(f.report.get("student")) if f.report else f.folder))


def grades_csv(result_dirs: list[Path], warn: Callable[[str], None] | None = None) -> str:
    """grades.csv of the students found in the result folders (merge shards by listing their folders):
    only reports this grader signed count, with scores clamped to the exercises' points (gradebook.py);
    a student graded twice with different scores is a GradesConflictError."""
    load_reports(result_dirs, warn)
    from .gradebook import grades_text

    return grades_text(result_dirs)
