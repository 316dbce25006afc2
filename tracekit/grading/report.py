"""Grading's record: typed results (`QuestionResult` → `ExerciseResult` → `StudentReport`) and the
one reader and writer of report files (atomic writes, the results folder's key, signatures,
students' folders).

What a sandbox or a judge hands back, and what a report file holds, is raw JSON: it is parsed into
these frozen types here, once, with every score clamped to what the exercise definitions allow and
every text cut to size. Past this module nothing reads a raw report. `to_json` is the file format,
`gradescope()` Gradescope's results.json (as otter-grader's `GradingResults.to_gradescope_dict`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exercises import IDS, get
from .submission import SubmissionError, read_regular

REPORT = "report.json"
RESULTS = "results.json"
KEY = ".tracekit-key"
ASSIGNMENT = "assignment.json"  # the assignment a results folder was graded for, once given
CSV_NAME = "grades.csv"
MANIFEST = "students.json"
MAX_REPORT_BYTES = 8 << 20
MAX_TEXT = 500  # characters of one message, note or error that a report keeps
MAX_ITEMS = 50  # notes, errors or problems of one kind that a report keeps
NOT_SUBMITTED = "not submitted"
NOT_GRADED = "not graded"  # an assigned exercise whose only notebooks could not be read
_PLAIN_FOLDER = re.compile(r"[a-z0-9_][a-z0-9_.@+-]{0,63}")
# names the results folder holds besides students' folders (and names some systems reserve)
RESERVED = {CSV_NAME, KEY, MANIFEST, ASSIGNMENT, "summary.html", "feedback", "canvas.csv", "moodle.csv",
            "gradebook", "con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}

Raw = Any  # JSON as it came: from a sandbox, a judge or a file; read only by the parsers below


# ---- parsing untrusted values ---------------------------------------------------------------------

def clamp(value: Raw, most: float) -> float:
    """A score as a number between 0 and `most` (two decimals); 0 for anything that is not a number."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if number != number:  # NaN
        return 0.0
    return round(max(0.0, min(float(most), number)), 2)


def cut(value: Raw, most: int = MAX_TEXT) -> str:
    """Text at most `most` characters long (and says how much was cut)."""
    text = str(value)
    return text if len(text) <= most else text[:most] + f"… [{len(text) - most} more characters]"


def cut_all(values: Raw, most: int = MAX_ITEMS) -> tuple[str, ...]:
    """A list of texts, each cut to size, at most `most` of them (and says how many more there were)."""
    items = values if isinstance(values, (list, tuple)) else []
    kept = [cut(v) for v in items[:most]]
    if len(items) > most:
        kept.append(f"… and {len(items) - most} more")
    return tuple(kept)


def timings(value: Raw) -> tuple[tuple[str, float], ...]:
    """Named durations in seconds (a part's timing: cells, probes, reference, judge ...) from raw JSON."""
    items = value.items() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    out = []
    for item in list(items)[:MAX_ITEMS]:
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], (int, float)) \
                and not isinstance(item[1], bool):
            out.append((cut(item[0], 40), clamp(item[1], 1e9)))
    return tuple(out)


def _dict(value: Raw) -> dict:
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Raw) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Raw) -> str | None:
    return value if isinstance(value, str) else None


class _Fields:
    """Read-only `report["score"]` access to the JSON a result is written as (what its file holds)."""

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __getitem__(self, name: str) -> Any:
        return self.to_json()[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The JSON field `name`, or `default`."""
        return self.to_json().get(name, default)


# ---- the record ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """What the kernel measured of a question's workload outside the answer's process."""

    peak_bytes: int
    reference_peak: int | None = None
    how: str = ""

    def to_json(self) -> dict[str, Any]:
        """The measurement as a report holds it."""
        return {"peak_bytes": self.peak_bytes, "reference_peak": self.reference_peak, "how": self.how}

    @classmethod
    def from_json(cls, raw: Raw) -> Measured | None:
        """A measurement from raw JSON (None unless it has an integer peak)."""
        raw = _dict(raw)
        peak = _int_or_none(raw.get("peak_bytes"))
        if peak is None:
            return None
        return cls(peak, _int_or_none(raw.get("reference_peak")), cut(raw.get("how") or "", 200))


@dataclass(frozen=True)
class QuestionResult(_Fields):
    """One question of one notebook: its score out of its points, the judge's message and status."""

    name: str
    score: float
    max_score: int
    message: str = ""
    status: str = ""
    prompt: str = ""
    wrong: tuple[str, ...] = ()
    measured: Measured | None = None

    def to_json(self) -> dict[str, Any]:
        """The question as a report holds it."""
        out: dict[str, Any] = {"name": self.name, "prompt": self.prompt, "score": self.score,
                               "max_score": self.max_score, "message": self.message, "status": self.status}
        if self.wrong:
            out["wrong"] = list(self.wrong)
        if self.measured is not None:
            out["measured"] = self.measured.to_json()
        return out

    @classmethod
    def from_json(cls, raw: Raw, points: int | None = None) -> QuestionResult:
        """A question from raw JSON, its score clamped to `points` (default: the question's definition)."""
        raw = _dict(raw)
        most = points if points is not None else clamp(raw.get("max_score"), 1000)
        wrong = raw.get("wrong")
        return cls(cut(raw.get("name", ""), 40), clamp(raw.get("score"), most), int(most),
                   cut(raw.get("message", ""), 4 * MAX_TEXT), cut(raw.get("status", ""), 40),
                   cut(raw.get("prompt", ""), 4 * MAX_TEXT),
                   tuple(cut(w, 200) for w in wrong[:MAX_ITEMS]) if isinstance(wrong, list) else (),
                   Measured.from_json(raw.get("measured")))


@dataclass(frozen=True)
class ExerciseResult(_Fields):
    """One notebook of one student (or an assigned exercise with none): per-question results and
    what happened while it ran. `exercise` None: a notebook that could not be read."""

    notebook: str | None
    exercise: str | None
    score: float
    max_score: int
    questions: tuple[QuestionResult, ...] = ()
    title: str = ""
    seed: int | None = None
    problem: str = ""
    status: str = ""  # "", NOT_SUBMITTED or NOT_GRADED
    sha256: str = ""
    release: str = ""  # the tracekit release the notebook says it was made for ("" if it does not say)
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    cell_errors: tuple[str, ...] = ()
    tampered: tuple[str, ...] = ()
    isolation: str = ""
    start: str = ""  # how its sandboxes started ("warm": forked from a trusted parent, or "cold")
    timing: tuple[tuple[str, float], ...] = ()  # seconds of each stage (sandbox start, cells, probes, judge ...)
    ran: bool = False  # it went through a sandbox (its `sandbox` entry is written)

    @property
    def submitted(self) -> bool:
        """A notebook was found for it."""
        return self.status != NOT_SUBMITTED

    def outcomes(self) -> list[str]:
        """Everything that happened to it that a student or instructor must be told: why it was not
        graded, each cell error, timeouts, skipped cells, notes (each line names the notebook)."""
        where = self.notebook or self.exercise or "?"
        lines = [f"{where}: {self.problem}"] if self.problem else []
        lines += [f"{where}: {e}" for e in self.cell_errors]
        lines += [f"{where}: {n}" for n in self.notes]
        return lines

    def to_json(self) -> dict[str, Any]:
        """The part as a report holds it."""
        out: dict[str, Any] = {"notebook": self.notebook, "exercise": self.exercise, "title": self.title,
                               "score": self.score, "max_score": self.max_score,
                               "questions": [q.to_json() for q in self.questions]}
        if self.seed is not None:
            out["seed"] = self.seed
        if self.ran:
            out["sandbox"] = {"seconds": self.seconds, "notes": list(self.notes),
                              "cell_errors": list(self.cell_errors), "tampered": list(self.tampered),
                              "isolation": self.isolation, "start": self.start, "timing": dict(self.timing)}
        if self.cell_errors:
            out["cell_errors"] = list(self.cell_errors)
        for name in ("problem", "status", "sha256", "release"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_json(cls, raw: Raw) -> ExerciseResult:
        """A part from raw JSON: scores clamped to the exercise's definition (an unknown exercise
        scores 0 of 0), questions only those the exercise has, every text cut to size."""
        raw = _dict(raw)
        exercise = raw.get("exercise") if raw.get("exercise") in IDS else None
        box = raw.get("sandbox")
        sandbox = _dict(box)
        if exercise is None:
            questions: tuple[QuestionResult, ...] = ()
            most = 0
        else:
            definition = get(exercise)
            points = {q.name: q.points for q in definition.questions}
            given = raw.get("questions") if isinstance(raw.get("questions"), list) else []
            questions = tuple(QuestionResult.from_json(q, points[q["name"]]) for q in given[:MAX_ITEMS]
                              if isinstance(q, dict) and q.get("name") in points)
            most = definition.max_score
        seconds = sandbox.get("seconds")
        return cls(
            notebook=cut(raw["notebook"], 300) if isinstance(raw.get("notebook"), str) else None,
            exercise=exercise, score=clamp(raw.get("score"), most), max_score=most, questions=questions,
            title=cut(raw.get("title") or "", 200), seed=_int_or_none(raw.get("seed")),
            problem=cut(raw.get("problem") or "", 2 * MAX_TEXT), status=cut(raw.get("status") or "", 40),
            sha256=cut(raw.get("sha256") or "", 64), release=cut(raw.get("release") or "", 40),
            seconds=clamp(seconds, 1e9) if isinstance(seconds, (int, float)) else 0.0,
            notes=cut_all(sandbox.get("notes")),
            cell_errors=cut_all(sandbox.get("cell_errors", raw.get("cell_errors"))),
            tampered=cut_all(sandbox.get("tampered"), 10), isolation=cut(sandbox.get("isolation") or "", 300),
            start=cut(sandbox.get("start") or "", 40), timing=timings(sandbox.get("timing")), ran=isinstance(box, dict))


def not_submitted(exercise_id: str, unreadable: list[str] | tuple[str, ...] = ()) -> ExerciseResult:
    """An assigned exercise no notebook was graded for: every question 0. `unreadable` names the
    student's notebooks that could not be read (then it is "not graded", with why, not "not submitted")."""
    exercise = get(exercise_id)
    if unreadable:
        why = f"{NOT_GRADED}: no notebook for this exercise could be read ({'; '.join(unreadable)})"
        status, message = NOT_GRADED, f"{NOT_GRADED}: the notebook could not be read (see the problem below)"
    else:
        why, status, message = "not submitted: no notebook for this exercise was found", NOT_SUBMITTED, NOT_SUBMITTED
    questions = tuple(QuestionResult(q.name, 0.0, q.points, cut(message, 4 * MAX_TEXT), status, q.prompt)
                      for q in exercise.questions)
    return ExerciseResult(None, exercise_id, 0.0, exercise.max_score, questions, exercise.title,
                          problem=cut(why, 2 * MAX_TEXT), status=status)


@dataclass(frozen=True)
class Submitted:
    """What a report was graded from: each notebook's sha256, and what discovery could not take."""

    notebooks: tuple[tuple[str, str], ...] = ()
    found: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """As a report holds it."""
        return {"notebooks": dict(self.notebooks), "found": list(self.found)}

    @classmethod
    def from_json(cls, raw: Raw) -> Submitted | None:
        """From raw JSON (None if it is not a record of a submission)."""
        if not isinstance(raw, dict):
            return None
        books = _dict(raw.get("notebooks"))
        found = raw.get("found")
        return cls(tuple((str(k), str(v)) for k, v in books.items()),
                   tuple(str(f) for f in found) if isinstance(found, list) else ())


@dataclass(frozen=True)
class StudentReport(_Fields):
    """One student's grading: every notebook's result, the total out of the assignment's points,
    the problems to tell her, and what it was graded from and by."""

    student: str
    score: float
    max_score: int
    exercises: tuple[ExerciseResult, ...] = ()
    problems: tuple[str, ...] = ()
    folder: str = ""
    tracekit: str = ""
    graded_at: str = ""
    isolation: str = ""
    complete: bool = True
    assigned: tuple[str, ...] | None = None
    seconds: float = 0.0
    submission: Submitted | None = None
    shard: tuple[int, int] | None = None
    regraded: str | None = None
    secret_id: str = ""  # which secret the inputs were drawn from (grader.secret_id: not the secret)
    extra: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # fields a newer grader wrote

    @property
    def parts(self) -> dict[str, ExerciseResult]:
        """The part that counts for each exercise (the first: one notebook per exercise counts)."""
        found: dict[str, ExerciseResult] = {}
        for p in self.exercises:
            if p.exercise is not None:
                found.setdefault(p.exercise, p)
        return found

    def to_json(self) -> dict[str, Any]:
        """The report as its file holds it (without the signature)."""
        return {**dict(self.extra), "student": self.student, "folder": self.folder, "tracekit": self.tracekit,
                "graded_at": self.graded_at, "isolation": self.isolation, "complete": self.complete,
                "assigned": list(self.assigned) if self.assigned is not None else None, "score": self.score,
                "max_score": self.max_score, "exercises": [p.to_json() for p in self.exercises],
                "problems": list(self.problems), "seconds": self.seconds,
                "submission": self.submission.to_json() if self.submission else None,
                "shard": list(self.shard) if self.shard else None, "regraded": self.regraded,
                **({"secret_id": self.secret_id} if self.secret_id else {})}

    @classmethod
    def from_json(cls, raw: Raw) -> StudentReport:
        """A report from raw JSON: every part parsed (see `ExerciseResult.from_json`), the total
        clamped to the assignment's points, texts cut to size."""
        raw = _dict(raw)
        assigned = raw.get("assigned")
        ids = tuple(sorted({e for e in assigned if e in IDS})) if isinstance(assigned, list) else None
        parts = tuple(ExerciseResult.from_json(p) for p in (raw.get("exercises") or [])[:MAX_ITEMS + 10]
                      if isinstance(p, dict)) if isinstance(raw.get("exercises"), list) else ()
        counted = ids if ids is not None else sorted({p.exercise for p in parts if p.exercise is not None})
        most = sum(get(e).max_score for e in counted)
        shard = raw.get("shard")
        known = {f.name for f in cls.__dataclass_fields__.values()} | {"signature"}
        return cls(
            student=str(raw.get("student", "")), score=clamp(raw.get("score"), most), max_score=most,
            exercises=parts, problems=cut_all(raw.get("problems"), 4 * MAX_ITEMS), folder=str(raw.get("folder", "")),
            tracekit=cut(raw.get("tracekit") or "", 40), graded_at=cut(raw.get("graded_at") or "", 40),
            isolation=cut(raw.get("isolation") or "", 500), complete=raw.get("complete") is True, assigned=ids,
            seconds=clamp(raw.get("seconds"), 1e9), submission=Submitted.from_json(raw.get("submission")),
            shard=(shard[0], shard[1]) if isinstance(shard, list) and len(shard) == 2
            and all(_int_or_none(s) is not None for s in shard) else None,
            regraded=_str_or_none(raw.get("regraded")), secret_id=cut(raw.get("secret_id") or "", 64),
            extra=tuple((k, v) for k, v in raw.items() if k not in known))

    def gradescope(self) -> dict[str, Any]:
        """The report in Gradescope's results.json format (its `output` names every outcome; every
        text is plain text, said so with `output_format`)."""
        tests = []
        lines = [] if self.isolation.startswith("isolation: full") else [self.isolation]
        lines += list(self.problems)
        for part in self.exercises:
            for q in part.questions:
                tests.append({"name": f"{part.exercise} {q.name}: {q.prompt}", "score": q.score,
                              "max_score": q.max_score, "output": q.message, "output_format": "text",
                              "visibility": "visible", "status": "passed" if q.score == q.max_score else "failed"})
        return {"score": self.score, "max_score": self.max_score, "tests": tests,
                "output": "\n".join(line for line in lines if line) or "graded by tracekit", "output_format": "text",
                "test_output_format": "text",  # student text shown as text: no link, no HTML
                "visibility": "visible", "execution_time": self.seconds}


def gradescope(report: StudentReport) -> dict[str, Any]:
    """Gradescope's results.json of a report (see `StudentReport.gradescope`)."""
    return report.gradescope()


# ---- the results folder --------------------------------------------------------------------------

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


def write_atomic(path: Path, text: str, bom: bool = False) -> None:
    """Write a file so that readers see the old content or the new one, never half (never
    through a link planted in its place); `bom` starts it with a UTF-8 byte order mark."""
    _move_aside(path.parent, folder=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    _move_aside(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8-sig" if bom else "utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def results_key(out: Path, create: bool) -> bytes | None:
    """The results folder's signing key (made, readable by its owner only, if `create`)."""
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


def signature(key: bytes, body: dict[str, Any]) -> str:
    """HMAC-SHA256 of a JSON document (without its `signature` field) under the results key."""
    text = json.dumps({k: v for k, v in body.items() if k != "signature"}, sort_keys=True).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def read_signed(path: Path, key: bytes | None, limit: int = MAX_REPORT_BYTES) -> dict | None:
    """A JSON object from a regular file whose signature verifies under `key` (else None)."""
    if key is None:
        return None
    try:
        raw = json.loads(read_regular(path, limit))
    except (SubmissionError, ValueError, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("signature"), str):
        return None
    if not hmac.compare_digest(raw["signature"], signature(key, raw)):
        return None
    return raw


def write_signed(path: Path, body: dict[str, Any], key: bytes) -> None:
    """Sign a JSON document and write it atomically."""
    write_atomic(path, json.dumps({**body, "signature": signature(key, body)}, indent=2))


def load_report(out: Path, folder: str, key: bytes | None) -> StudentReport | None:
    """A student's report if it is a regular file this grader signed (else None)."""
    raw = read_signed(out / folder / REPORT, key)
    return StudentReport.from_json(raw) if raw is not None else None


def has_report(out: Path, folder: str) -> bool:
    """Something sits where a report or its results.json goes (signed or not)."""
    return (out / folder / REPORT).exists() or (out / folder / RESULTS).exists()


def write_report(out: Path, report: StudentReport, key: bytes) -> None:
    """Sign and write report.json, then results.json (written last: marks "done")."""
    folder = out / report.folder
    write_signed(folder / REPORT, report.to_json(), key)
    write_atomic(folder / RESULTS, json.dumps(report.gradescope(), indent=2))


def read_assignment(out: Path, key: bytes | None) -> tuple[str, ...] | None:
    """The assignment a results folder was graded for (None: never given, or not signed by its key)."""
    raw = read_signed(out / ASSIGNMENT, key, 1 << 16)
    exercises = raw.get("exercises") if raw else None
    if not isinstance(exercises, list) or not exercises or not all(e in IDS for e in exercises):
        return None
    return tuple(sorted(set(exercises)))


def write_assignment(out: Path, exercises: tuple[str, ...], key: bytes) -> None:
    """Record the assignment a results folder is graded for."""
    write_signed(out / ASSIGNMENT, {"exercises": list(exercises)}, key)
