"""The trusted side of grading: find submissions, run each in its sandboxes, judge the raw
observations against truth computed now, and write signed per-student reports (report.py's
types; the class gradebook is made from them by gradebook.py, which the CLI calls after grading).

Nothing a sandbox produces is trusted: it can only send JSON observation lines on a pipe, which
are parsed into `QuestionResult`s here with every score clamped to what the exercise definitions
allow. Reports are written by this process alone and signed (HMAC, with a key kept in the results
folder); each records the sha256 of every notebook it graded. A rerun keeps a student's report
only if it verifies and her notebooks, the assignment (the results folder's, once given) and
tracekit are unchanged (`force` regrades everyone).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import os
import sys
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
from . import ahead, isolation, sandbox
from .report import (
    ASSIGNMENT,
    CSV_NAME,
    KEY,
    MANIFEST,
    MAX_ITEMS,
    MAX_REPORT_BYTES,
    MAX_TEXT,
    NOT_GRADED,
    REPORT,
    RESERVED,
    RESULTS,
    ExerciseResult,
    Measured,
    QuestionResult,
    StudentReport,
    Submitted,
    clamp,
    cut,
    cut_all,
    folder_for,
    gradescope,
    has_report,
    load_report,
    not_submitted,
    read_assignment,
    results_key,
    timings,
    write_assignment,
    write_atomic,
    write_report,
)
from .submission import MAX_NOTEBOOK_BYTES, Notebook, SubmissionError, discover_all, read, read_regular

__all__ = ["ASSIGNMENT", "CSV_NAME", "KEY", "MANIFEST", "MAX_ITEMS", "MAX_REPORT_BYTES", "MAX_TEXT", "REPORT",
           "RESERVED", "RESULTS", "Options", "check_isolation", "folder_for", "grade_all", "grade_notebook",
           "grade_student", "gradescope", "in_shard", "load_report", "make_report", "not_submitted", "outcomes",
           "parse_exercises", "parse_shard", "read_secret", "secret_id", "student_seed", "write_atomic",
           "write_report"]

MAX_NOTEBOOKS = 40  # notebooks of one student that are looked at
_clamp, _key = clamp, results_key  # the names autograder.py and older tests import


@dataclass(frozen=True)
class Options:
    """Limits for each submission, what the assignment is, and how the class is split."""

    timeout: float = 120.0  # seconds per notebook (CPU-seconds where a cgroup counts them: cli.TIMEOUT_HELP)
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


def secret_id(secret: bytes) -> str:
    """Which secret a grading drew its inputs from, said without the secret (an HMAC of a fixed
    text under it): a rerun with another secret regrades, as its students' inputs change."""
    return hmac.new(secret, b"tracekit-secret-id", hashlib.sha256).hexdigest()[:16]


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


def _release_note(release: str) -> list[str]:
    """What to say of a notebook made for another tracekit release (nothing when it is this one or
    it does not say)."""
    if not release or release == __version__:
        return []
    return [f"this notebook was released with tracekit {release} and is graded by tracekit {__version__}: "
            "answers renamed or changed since then score less; get the current notebook (`tracekit course` or "
            "your instructor's release) and move your answers into it"]


def grade_notebook(path: Path | Notebook, student: str, options: Options) -> ExerciseResult:
    """Grade one notebook: per-question results and what happened (a notebook that cannot be read
    is a problem with no exercise, never a score)."""
    shown = path.shown if isinstance(path, Notebook) else Path(path).name
    sha = path.sha256 if isinstance(path, Notebook) else ""
    try:
        sub = read(path, student, options.max_notebook_mb << 20)
    except SubmissionError as err:
        return ExerciseResult(shown, None, 0.0, 0, problem=cut(str(err), 2 * MAX_TEXT), status=NOT_GRADED,
                              sha256=sha)  # the error names the notebook and what is wrong with it
    exercise = get(sub.exercise)
    seed = student_seed(options.secret or b"", sub.exercise, student, content_digest(sub.code_cells))
    inputs = draw_inputs(exercise, seed)
    limits = {"memory_mb": options.memory_mb, "max_pids": options.max_pids, "tmpfs_mb": options.tmpfs_mb}
    peaks = {q.name: functools.partial(ahead.reference_peak, sub.exercise, q.name,
                                       {**inputs[q.name]["measure"]["grade"], "seed": 0}, **limits)
             for q in exercise.questions if q.measure is not None}
    # warm: the reference measured beside the submission; cold, after it (three fresh interpreters on two
    # cores measured a leaking loop within the slack once in CI)
    started = {name: peak() for name, peak in peaks.items()} if sandbox.start_kind() == "warm" else {}
    truth = ahead.truth(sub.exercise, inputs)  # both beside the submission's sandbox, which sees neither
    ran = sandbox.run(sub.code_cells, sub.exercise, inputs, timeout=options.timeout,
                      memory_mb=options.memory_mb, hide=list(options.hide), max_pids=options.max_pids,
                      tmpfs_mb=options.tmpfs_mb, cell_timeout=options.cell_timeout)
    notes = _release_note(sub.release) + sub.warnings + ran.notes
    measured: dict[str, dict] = {}
    timing = {**ran.timing}
    began = time.monotonic()
    for name, m in ran.measured.items():
        try:
            base = ahead.comparable_peak(started.get(name) or peaks[name](), ran.start, again=peaks[name],
                                         how=m.get("how"))
        except Exception as err:  # noqa: BLE001 - the grader's own failure: reported, never the student's
            base = None
            notes.append(f"{name}: the reference measurement failed ({type(err).__name__}: {str(err)[:200]})")
        measured[name] = {**m, "reference_peak": base}
    timing["reference"] = round(time.monotonic() - began, 3)
    began = time.monotonic()
    with contextlib.suppress(Exception):  # a judge that cannot prepare fails again below, and says so
        truth.result()
    with ahead.trusted():
        judged = judge_all(exercise, ran.observations or {}, inputs, measured)
    by_name = {str(q.get("name")): q for q in judged if isinstance(q, dict)}
    failed = "not graded: " + ("; ".join(ran.notes) or "the notebook could not be run")
    questions = []
    for q in exercise.questions:
        result = QuestionResult.from_json({"prompt": q.prompt, **by_name.get(q.name, {}), "name": q.name}, q.points)
        seen = measured.get(q.name) or {}
        if seen.get("peak_bytes") is not None:
            result = dataclasses.replace(result, measured=Measured.from_json(seen))
        if ran.observations is None:
            result = dataclasses.replace(result, message=cut(failed, 4 * MAX_TEXT))
        questions.append(result)
    timing["judge"] = round(time.monotonic() - began, 3)
    if ran.survivors:
        notes.append(f"{ran.survivors} process(es) of the sandbox survived being killed")
    problem = ""
    if ran.observations is None or ran.failures:
        problem = "not graded: " + ("; ".join(ran.failures or ran.notes) or "the notebook could not be run")
    return ExerciseResult(
        shown, sub.exercise, clamp(sum(q.score for q in questions), exercise.max_score), exercise.max_score,
        tuple(questions), exercise.title, seed, cut(problem, 2 * MAX_TEXT), sha256=sha, release=cut(sub.release, 40),
        seconds=round(ran.seconds, 2), notes=cut_all(notes), cell_errors=cut_all(ran.cell_errors),
        isolation=ran.isolation, start=cut(ran.start, 40), timing=timings(timing), ran=True)


def _shown(name: str) -> str:
    """A file name as text that tells apart names which only look alike."""
    return name if name.isascii() else ascii(name)


def _part(part: ExerciseResult | dict) -> ExerciseResult:
    return part if isinstance(part, ExerciseResult) else ExerciseResult.from_json(part)


def outcomes(part: ExerciseResult | dict) -> list[str]:
    """Everything that happened to one notebook that a student or instructor must be told (see
    `ExerciseResult.outcomes`); a raw part is parsed first."""
    return _part(part).outcomes()


def make_report(student: str, parts: list[ExerciseResult | dict], problems: list[str], seconds: float,
                complete: bool = True, assigned: tuple[str, ...] | None = None,
                submission: Submitted | dict | None = None, shard: tuple[int, int] | None = None,
                reason: str | None = None, secret: bytes | None = None) -> StudentReport:
    """A student's report, with scores clamped to what the exercise definitions allow and every
    text from a sandbox cut to size (raw parts are parsed at this boundary; `secret`: the one the
    inputs were drawn from, recorded as its secret_id)."""
    typed = tuple(_part(p) for p in parts)
    ids = list(assigned) if assigned is not None else [p.exercise for p in typed if p.exercise is not None]
    most = sum(get(e).max_score for e in ids)
    total = sum(p.score for p in typed if p.exercise in ids)
    named = list(problems) + [line for p in typed for line in p.outcomes()]
    if isinstance(submission, dict):
        submission = Submitted.from_json(submission)
    starts = sorted({p.start for p in typed if p.start in ("warm", "cold")})
    started = f"; sandboxes started {' and '.join(starts)}" if starts else ""  # the grades' isolation column says it
    return StudentReport(
        student=student, score=clamp(total, most), max_score=most, exercises=typed,
        problems=cut_all(named, 4 * MAX_ITEMS), folder=folder_for(student), tracekit=__version__,
        graded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), isolation=isolation.detect().describe() + started,
        complete=complete, assigned=tuple(assigned) if assigned is not None else None, seconds=round(seconds, 2),
        submission=submission, shard=tuple(shard) if shard else None, regraded=reason,
        secret_id=secret_id(secret) if secret else "")


def grade_student(student: str, notebooks: list[Notebook | Path], out: Path, options: Options,
                  problems: list[str] | None = None, key: bytes | None = None,
                  submission: Submitted | None = None, reason: str | None = None) -> StudentReport:
    """Grade a student's notebooks (one per exercise of the assignment; others reported, not graded;
    an assigned exercise without a notebook scores 0) and write the signed report.json and
    Gradescope's results.json."""
    started = time.monotonic()
    parts: list[ExerciseResult] = []
    graded: dict[str, str] = {}
    unreadable: list[str] = []
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
        if part.exercise is not None:
            graded[part.exercise] = shown
        else:
            unreadable.append(part.problem)  # it names the notebook
        parts.append(part)
    for exercise_id in assigned or ():
        if exercise_id not in graded:
            parts.append(not_submitted(exercise_id, unreadable))
    report = make_report(student, parts, extra, time.monotonic() - started, assigned=assigned,
                         submission=submission, shard=options.shard, reason=reason, secret=options.secret)
    write_report(out, report, key if key is not None else results_key(out, create=True))
    return report


def _fingerprint(notebooks: list[Notebook], problems: list[str]) -> Submitted:
    """What a report was graded from: each notebook's sha256, and what discovery could not take."""
    return Submitted(tuple((nb.shown, nb.sha256) for nb in notebooks), tuple(sorted(problems)))


def _why_regrade(done: StudentReport | None, student: str, now: Submitted, options: Options,
                 planted: bool, secret: str = "") -> str | None:
    """None when the report on file still holds; else why this student is graded (again) (`secret`:
    the secret_id of the secret this run draws inputs from)."""
    if options.force:
        return "--force"
    if done is None:
        return "its report does not verify" if planted else "new"
    if done.student != student:
        return "new"
    if not done.complete:
        return "its last grading did not finish"
    before = done.submission or Submitted()
    old, new = dict(before.notebooks), dict(now.notebooks)
    if old != new:
        changed = sorted(n for n in set(old) | set(new) if old.get(n) != new.get(n))
        return "changed: " + ", ".join(changed[:5]) + (" …" if len(changed) > 5 else "")
    if before.found != now.found:
        return "changed: what was submitted besides the notebooks"
    if done.assigned != options.exercises:
        return "the assignment changed"
    if done.tracekit != __version__:
        return f"graded by tracekit {done.tracekit}"
    if secret and done.secret_id != secret:
        return "the secret the inputs are drawn from changed (--secret-file)"
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


def _recorded(out: Path, key: bytes | None, existing: dict[str, StudentReport]) -> tuple[str, ...] | None:
    """The assignment this results folder was graded for: its assignment.json, else the one every
    signed report in it agrees on (a folder graded before assignment.json was written)."""
    recorded = read_assignment(out, key)
    if recorded is not None:
        return recorded
    seen = {r.assigned for r in existing.values()}
    return seen.pop() if len(seen) == 1 and None not in seen else None


def assignment_for(out: Path, options: Options, key: bytes | None, existing: dict[str, StudentReport],
                   say: Callable[[str], None]) -> tuple[str, ...] | None:
    """The assignment to grade for: the one given, else the one the results folder was graded for
    (a rerun without --exercises keeps it); a change is said, never silent."""
    recorded = _recorded(out, key, existing)
    given = options.exercises
    if given is None and recorded is not None:
        say(f"assignment: {','.join(recorded)} (as this results folder was graded; pass --exercises to change it)")
        return recorded
    if given is not None and recorded is not None and given != recorded:
        say(f"NOTE: the assignment changes from {','.join(recorded)} to {','.join(given)}: every student is "
            "graded for the new one")
    return given


def grade_all(submissions: Path, out: Path, options: Options,
              progress: Callable[[str], None] | None = None) -> list[StudentReport]:
    """Grade every student of this shard whose report is missing, does not verify, or was graded
    from other notebooks or for another assignment (or everyone, with `force`), and write their
    signed reports (the gradebook is written from them by `gradebook.write_from`). `submissions`
    is a folder of submissions or one notebook."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    if Path(out).exists() and not Path(out).is_dir():
        raise SubmissionError(f"--out {out} is a file: give a folder for the results (made if missing)")
    found = discover_all(Path(submissions), options.layout, options.max_notebook_mb << 20)
    try:
        return _grade_found(found, Path(submissions), out, options, say)
    finally:
        found.close()


def _existing(out: Path, key: bytes | None) -> dict[str, StudentReport]:
    existing: dict[str, StudentReport] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(out):
            if entry.is_dir(follow_symlinks=False):
                report = load_report(out, entry.name, key)
                if report is not None:
                    existing[entry.name] = report
    return existing


def _keep(out: Path, folder: str, done: StudentReport) -> None:
    """results.json always follows the signed report it is kept from."""
    derived = json.dumps(done.gradescope(), indent=2)
    try:
        current = read_regular(out / folder / RESULTS, MAX_REPORT_BYTES).decode("utf-8")
    except (SubmissionError, UnicodeDecodeError):
        current = None
    if current != derived:
        write_atomic(out / folder / RESULTS, derived)


def _grade_found(found: Any, submissions: Path, out: Path, options: Options,
                 say: Callable[[str], None]) -> list[StudentReport]:
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
    key = results_key(out, create=True)
    _manifest(out, sorted(found.notebooks))
    existing = _existing(out, key)
    options = dataclasses.replace(options, exercises=assignment_for(out, options, key, existing, say))
    if options.exercises is not None:
        write_assignment(out, options.exercises, key)
    todo: list[tuple[str, str, Submitted]] = []
    kept = 0
    drawn_from = secret_id(options.secret or key)
    for s in mine:
        now = _fingerprint(found.notebooks[s], found.problems.get(s, []))
        folder = folder_for(s)
        done = existing.get(folder)
        why = _why_regrade(done, s, now, options, has_report(out, folder), drawn_from)
        if why is None:
            kept += 1
            _keep(out, folder, done)
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
    counts = {r.shard for r in existing.values() if r.shard is not None}
    if any(n != options.shard[1] for _, n in counts):
        say(f"WARNING: {out} holds results of a run with another shard count "
            f"({', '.join(sorted({str(n) for _, n in counts}))}; this run: {options.shard[1]}): students may be "
            "listed twice; grade into fresh results folders, or `tracekit grades` will refuse conflicting scores")
    folder = submissions if submissions.is_dir() else submissions.parent  # one notebook: its folder
    hide = tuple(str(p) for p in (folder.resolve(), out.resolve(), *map(Path, options.hide)))
    opts = dataclasses.replace(options, hide=hide, secret=options.secret or key)
    reports = _grade_each(todo, found, out, opts, key, say)
    if not iso.full:
        say(iso.describe())
    return reports


def _grade_each(todo: list[tuple[str, str, Submitted]], found: Any, out: Path, options: Options, key: bytes,
                say: Callable[[str], None]) -> list[StudentReport]:
    """Grade the students to do, `options.jobs` at once; one that fails gets an incomplete report."""
    reports = []
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(grade_student, s, found.notebooks[s], out, options, found.problems.get(s), key, now,
                               why): s for s, why, now in todo}
        for done_count, future in enumerate(as_completed(futures), 1):
            student = futures[future]
            try:
                report = future.result()
            except Exception as err:  # noqa: BLE001 - one broken submission never stops the batch
                why = f"grading failed ({type(err).__name__}: {str(err)[:300]}); rerun to retry"
                report = make_report(student, [], [why, *found.problems.get(student, [])], 0.0, complete=False,
                                     assigned=options.exercises, shard=options.shard, secret=options.secret)
                with contextlib.suppress(OSError):
                    write_report(out, report, key)
                say(f"[{done_count}/{len(todo)}] {student}: {why}")
                reports.append(report)
                continue
            reports.append(report)
            say(f"[{done_count}/{len(todo)}] {student}: {progress_line(report)}")
    return reports


def progress_line(report: StudentReport) -> str:
    """A student's score as the progress line says it, and why a notebook was not graded."""
    unread = [p for p in report.exercises if p.exercise is None and p.problem]
    if unread and report.max_score == 0:  # nothing to score: not "0/0"
        return "; ".join(f"{p.notebook}: {p.problem}" for p in unread)
    line = f"{report.score:g}/{report.max_score} ({report.seconds:.1f} s)"
    if unread:
        line += " — " + "; ".join(f"{p.notebook}: {p.problem}" for p in unread)
    return line
