"""The class as data: one row per student, made from the signed reports the grader wrote, with
every score clamped to what the exercise definitions allow and every piece of student text made
visible (invisible and control characters shown as escapes, messages on one line). The views
(gradebook.py: the CSVs and the feedback; summary.py: the HTML page) read only this.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GradebookError, GradesConflictError
from ..exercises import IDS, get
from .report import (
    NOT_GRADED,
    NOT_SUBMITTED,
    ExerciseResult,
    QuestionResult,
    StudentReport,
    folder_for,
    has_report,
    load_report,
    results_key,
)

GRADES, CANVAS, MOODLE, SUMMARY, FEEDBACK = "grades.csv", "canvas.csv", "moodle.csv", "summary.html", "feedback"
OUTPUTS = (GRADES, CANVAS, MOODLE, SUMMARY, FEEDBACK)  # the gradebook's files: no student's results folder
_FOLDER = re.compile(r"[\w][\w .@+-]{0,99}")
_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
TEXT_MOST = 2000  # characters of one message or problem


def visible(text: Any) -> str:
    """Text with every invisible or control character (zero-width, bidi, tab, newline ...) written
    as a Python escape, so that two names which only look alike are shown apart."""
    out = []
    for ch in str(text):
        if unicodedata.category(ch) in _INVISIBLE or (ch.isspace() and ch != " "):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def one_line(text: Any) -> str:
    """A message on one line (line breaks become ' / '), invisible characters escaped."""
    text = re.sub(r"\s*[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+\s*", " / ", str(text))
    return visible(text.replace("\t", " ").strip())


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_CASES = re.compile(r"^(?:…(?:,\s*…)*):\s*")  # a table hint's leading list of the cases it is about
_DTYPE = re.compile(r"\b(?:b?float|u?int|complex)\d+\b|\bbool\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])")
_RUNS = re.compile(r"…(?:(?:,\s*|\s*[x×]\s*)…)+")  # "…, …, …" (a list of drawn values) or "…×…": one …


def what_was_wrong(message: str) -> tuple[str, ...]:
    """A judge's message as the kinds of mistake it names, without what differs from student to
    student (the drawn cases, sizes, dtypes, numbers: each becomes …), so that two students who
    made the same mistake on other inputs give the same kinds."""
    kinds = []
    for hint in str(message).split("; "):
        text = _QUOTED.sub("…", hint)
        text = _DTYPE.sub("…", text)
        text = _NUMBER.sub("…", text)
        text = _RUNS.sub("…", text)
        text = _CASES.sub("", text).strip()
        if text and text not in kinds:
            kinds.append(text)
    return tuple(kinds)


def shorten(text: str, most: int) -> str:
    """Text of at most `most` characters, cut at a word boundary (with …), never inside a word."""
    if len(text) <= most:
        return text
    head = text[:most + 1]  # the character after the room tells whether the last word ends there
    space = head.rfind(" ")
    kept = head[:space] if space > 0 else head[:most]  # only a first word longer than the room is cut
    return kept.rstrip(" ,;:") + " …"


def number(value: float) -> str:
    """A score as text: 5, 1.33 (two decimals at most, no trailing zeros)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Question:
    """One question of one exercise, for one student: score (None: no notebook), message, wrong entries."""

    score: float | None
    points: int
    message: str = ""
    status: str = ""
    wrong: tuple[str, ...] = ()


@dataclass(frozen=True)
class Part:
    """One exercise of one student: graded (score), not submitted, or not graded (problem)."""

    exercise: str
    score: float | None  # None: no notebook and not assigned
    max_score: int
    questions: dict[str, Question]
    notebook: str = ""
    submitted: bool = True
    problem: str = ""
    notes: tuple[str, ...] = ()
    seed: str = ""
    graded: bool = True  # False: its notebooks could not be read (the problem says why)


@dataclass(frozen=True)
class Row:
    """One student of the class (or one results folder whose report this grader did not sign)."""

    student: str  # as shown: invisible characters escaped
    folder: str
    parts: dict[str, Part]
    score: float
    max_score: int
    problems: tuple[str, ...]
    isolation: str = "full"
    signed: bool = True

    @property
    def missing(self) -> list[str]:
        """The exercises with no notebook (assigned, or in the class's columns)."""
        return [e for e, p in self.parts.items() if not p.submitted]


@dataclass(frozen=True)
class Gradebook:
    """The class: its rows (sorted), the exercise columns, and what was assigned (None: unknown)."""

    rows: list[Row]
    columns: list[str]
    assigned: list[str] | None
    notes: list[str] = field(default_factory=list)

    @property
    def signed(self) -> list[Row]:
        """The rows with a signed report (the ones that have grades)."""
        return [r for r in self.rows if r.signed]


def _typed(report: StudentReport | dict) -> StudentReport:
    return report if isinstance(report, StudentReport) else StudentReport.from_json(report)


def safe_folder(report: StudentReport | dict) -> str:
    """The report's results folder if it is one plain path component, else the hashed name."""
    report = _typed(report)
    folder = report.folder
    if folder == folder_for(report.student) and folder.lower() not in OUTPUTS:
        return folder  # the grader's own rule for this student (plain, or ~slug-hash)
    if _FOLDER.fullmatch(folder) and not folder.endswith((".", " ")) and folder.lower() not in OUTPUTS:
        return folder
    return "student-" + hashlib.sha256(report.student.encode()).hexdigest()[:12]


def _strings(values: tuple[str, ...], most: int = 100) -> tuple[str, ...]:
    return tuple(one_line(v)[:200] for v in values[:most])


def _question(q: QuestionResult | None, points: int) -> Question:
    if q is None:
        return Question(0.0, points, "no result for this question")
    return Question(min(q.score, float(points)), points, one_line(q.message)[:TEXT_MOST], q.status[:40],
                    _strings(q.wrong))


def _part(raw: ExerciseResult | None, exercise: str, assigned: bool) -> Part:
    """What one report says of one exercise, with every score within the exercise's definition."""
    definition = get(exercise)
    if raw is None or raw.status == NOT_SUBMITTED:
        score = 0.0 if assigned or raw is not None else None
        questions = {q.name: Question(score, q.points) for q in definition.questions}
        return Part(exercise, score, definition.max_score, questions, submitted=False)
    given = {q.name: q for q in raw.questions}
    questions = {q.name: _question(given.get(q.name), q.points) for q in definition.questions}
    return Part(exercise, min(raw.score, float(definition.max_score)), definition.max_score, questions,
                one_line(raw.notebook or "")[:200], True, one_line(raw.problem)[:TEXT_MOST],
                _strings(raw.cell_errors) + _strings(raw.notes), str(raw.seed)[:40] if raw.seed is not None else "",
                graded=raw.status != NOT_GRADED)


def _row(report: StudentReport, columns: list[str], assigned: set[str]) -> Row:
    parts = {e: _part(report.parts.get(e), e, e in assigned) for e in columns}
    counted = [p for p in parts.values() if p.score is not None]
    problems = [one_line(p) for p in report.problems][:200]
    missing = [e for e, p in parts.items() if not p.submitted and e in assigned]
    if missing and not any(NOT_SUBMITTED in p for p in problems):
        problems.append(f"{NOT_SUBMITTED}: {', '.join(missing)}")
    iso, _, started = one_line(report.isolation).partition("; sandboxes started ")
    return Row(visible(report.student), safe_folder(report), parts,
               round(sum(p.score for p in counted), 2), sum(p.max_score for p in counted), tuple(problems),
               ("full" if iso.startswith("isolation: full") else iso) + (f", {started}" if started else ""))


def collation(name: str) -> tuple[str, str]:
    """A sort key that orders names as people do, the same on every machine: letters without their
    accents, case folded ("alice" < "José María" < "zoë"), then the exact name to break ties."""
    plain = "".join(ch for ch in unicodedata.normalize("NFKD", name) if not unicodedata.combining(ch))
    return plain.casefold(), name


def collect(reports: list[StudentReport | dict], assigned: list[str] | None = None,
            unsigned: list[str] | tuple[str, ...] = ()) -> Gradebook:
    """The class from its reports: the columns are the assignment (given, else what the reports
    record), else every exercise someone submitted; `unsigned` names folders whose report did not verify."""
    typed = [_typed(r) for r in reports]
    notes = []
    if assigned is None:
        recorded = {r.assigned for r in typed if r.assigned is not None}
        if len(recorded) > 1:
            notes.append("the reports were graded for different assignments: "
                         + "; ".join(", ".join(a) for a in sorted(recorded)))
        if recorded:
            assigned = sorted({e for a in recorded for e in a})
    if assigned is not None:
        unknown = [e for e in assigned if e not in IDS]
        if unknown:
            raise GradebookError(f"no exercise {', '.join(map(repr, unknown))}: choose from {', '.join(IDS)}")
        columns = sorted(set(assigned))
    else:
        columns = sorted({p.exercise for r in typed for p in r.exercises
                          if p.exercise is not None and p.status != NOT_SUBMITTED})
    given = set(columns if assigned is not None else ())
    rows = [_row(r, columns, given) for r in typed]
    for folder in unsigned:
        rows.append(Row(visible(folder), folder, {}, 0.0, 0, ("its report is not one this grader signed: regrade it",),
                        "", signed=False))
    rows.sort(key=lambda r: (not r.signed, collation(r.student), r.folder))
    return Gradebook(rows, columns, sorted(set(assigned)) if assigned is not None else None, notes)


# ---- reading the results folders ------------------------------------------------------------------

def _scores(report: StudentReport) -> tuple:
    return report.score, tuple(sorted((str(p.exercise), p.score) for p in report.exercises))


def _signed_in(root: Path) -> tuple[dict[str, tuple[StudentReport, Path]], list[str]]:
    """One results folder's signed reports by student, and its folders with a report that does not
    verify. Of two reports of one student, the one in the folder the grader uses now counts (the
    other is left from a grader that named folders otherwise)."""
    key = results_key(root, create=False)
    try:
        folders = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except OSError:
        return {}, []
    found: dict[str, tuple[StudentReport, Path]] = {}
    unsigned = []
    for folder in folders:
        if folder in OUTPUTS:
            continue
        report = load_report(root, folder, key)
        if report is None or report.folder != folder:  # a signed report copied to another folder
            if has_report(root, folder):
                unsigned.append(folder)
            continue
        if report.student not in found or folder == folder_for(report.student):
            found[report.student] = (report, root / folder)
    return found, unsigned


def load_reports(result_dirs: list[Path], warn: Callable[[str], None] | None = None
                 ) -> tuple[list[StudentReport], list[str]]:
    """The signed reports in these results folders (shards merged), and the folders holding a
    report this grader did not sign. A student found in two shards with other scores is a
    GradesConflictError; results from runs with different shard counts are warned about."""
    say = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    found: dict[str, tuple[StudentReport, Path]] = {}  # student -> (report, its folder)
    unsigned: list[str] = []
    counts: set[int] = set()
    for root in result_dirs:
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise GradebookError(f"{root} is a file, not a results folder (give the --out folder of `tracekit grade`)")
        if not root.is_dir():
            raise GradebookError(f"no such results folder: {root}")
        here, bad = _signed_in(root)
        unsigned += bad
        for student, (report, where) in here.items():
            if report.shard is not None:
                counts.add(report.shard[1])
            if student in found and _scores(found[student][0]) != _scores(report):
                raise GradesConflictError(
                    f"{visible(student)!r} was graded twice with different scores, in {found[student][1]} "
                    f"({found[student][0].score:g}) and {where} ({report.score:g}): a rerun with another shard "
                    "count? Delete the stale results folder and merge again")
            if student in found:
                say(f"note: {visible(student)!r} is in more than one results folder with the same score: listed once")
                if report.graded_at <= found[student][0].graded_at:
                    continue
            found[student] = (report, where)
    if len(counts) > 1:
        shown = ", ".join(map(str, sorted(counts)))
        say(f"WARNING: these results come from runs with different shard counts ({shown})")
    if not found and not unsigned:
        shown = ", ".join(map(str, result_dirs))
        raise GradebookError(f"no results in {shown}: no student's report.json there (grade into it first: "
                             f"`tracekit grade SUBMISSIONS --out {result_dirs[0]}`)")
    return [r for r, _ in found.values()], sorted(set(unsigned))
