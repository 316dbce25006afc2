"""The class as data: one row per student, made from the signed reports the grader wrote, with
every score clamped to what the exercise definitions allow and every piece of student text made
visible (invisible and control characters shown as escapes, messages on one line). The views
(gradebook.py: the CSVs and the feedback; summary.py: the HTML page) read only this.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GradebookError
from ..exercises import IDS, get
from .grader import REPORT, RESULTS, _clamp, _key, folder_for, load_report

GRADES, CANVAS, MOODLE, SUMMARY, FEEDBACK = "grades.csv", "canvas.csv", "moodle.csv", "summary.html", "feedback"
OUTPUTS = (GRADES, CANVAS, MOODLE, SUMMARY, FEEDBACK)  # the gradebook's files: no student's results folder
NOT_SUBMITTED = "not submitted"
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


def safe_folder(report: dict[str, Any]) -> str:
    """The report's results folder if it is one plain path component, else the hashed name."""
    folder = str(report.get("folder", ""))
    if folder == folder_for(str(report.get("student", ""))) and folder.lower() not in OUTPUTS:
        return folder  # the grader's own rule for this student (plain, or ~slug-hash)
    if _FOLDER.fullmatch(folder) and not folder.endswith((".", " ")) and folder.lower() not in OUTPUTS:
        return folder
    return "student-" + hashlib.sha256(str(report.get("student", "")).encode()).hexdigest()[:12]


def _strings(value: Any, most: int = 100) -> tuple[str, ...]:
    return tuple(one_line(v)[:200] for v in value[:most]) if isinstance(value, list) else ()


def _question(q: dict[str, Any], points: int) -> Question:
    return Question(_clamp(q.get("score"), points), points, one_line(q.get("message", ""))[:TEXT_MOST],
                    str(q.get("status", ""))[:40], _strings(q.get("wrong")))


def _part(raw: dict[str, Any] | None, exercise: str, assigned: bool) -> Part:
    """What one report says of one exercise, with every score clamped to the exercise's definition."""
    definition = get(exercise)
    if raw is None or raw.get("status") == NOT_SUBMITTED:
        score = 0.0 if assigned or raw is not None else None
        questions = {q.name: Question(score, q.points) for q in definition.questions}
        return Part(exercise, score, definition.max_score, questions, submitted=False)
    given = {str(q.get("name")): q for q in raw.get("questions", []) if isinstance(q, dict)}
    questions = {q.name: _question(given.get(q.name, {"message": "no result for this question"}), q.points)
                 for q in definition.questions}
    sandbox = raw.get("sandbox") if isinstance(raw.get("sandbox"), dict) else {}
    notes = _strings(sandbox.get("cell_errors")) + _strings(sandbox.get("notes"))
    seed = raw.get("seed")
    return Part(exercise, _clamp(raw.get("score"), definition.max_score), definition.max_score, questions,
                one_line(raw.get("notebook", ""))[:200], True, one_line(raw.get("problem") or "")[:TEXT_MOST],
                notes, str(seed)[:40] if isinstance(seed, (int, str)) else "")


def _row(report: dict[str, Any], columns: list[str], assigned: set[str]) -> Row:
    raw_parts: dict[str, dict[str, Any]] = {}
    for p in report.get("exercises", []):
        if isinstance(p, dict) and p.get("exercise") in IDS:
            raw_parts.setdefault(str(p["exercise"]), p)  # one notebook per exercise counts (the grader's rule)
    parts = {e: _part(raw_parts.get(e), e, e in assigned) for e in columns}
    counted = [p for p in parts.values() if p.score is not None]
    problems = [one_line(p) for p in report.get("problems", [])][:200]
    missing = [e for e, p in parts.items() if not p.submitted and e in assigned]
    if missing and not any(NOT_SUBMITTED in p for p in problems):
        problems.append(f"{NOT_SUBMITTED}: {', '.join(missing)}")
    iso = one_line(report.get("isolation", ""))
    return Row(visible(report.get("student", "")), safe_folder(report), parts,
               round(sum(p.score for p in counted), 2), sum(p.max_score for p in counted), tuple(problems),
               "full" if iso.startswith("isolation: full") else iso)


def collect(reports: list[dict[str, Any]], assigned: list[str] | None = None,
            unsigned: list[str] | tuple[str, ...] = ()) -> Gradebook:
    """The class from its reports: the columns are the assignment (given, else what the reports
    record), else every exercise someone submitted; `unsigned` names folders whose report did not verify."""
    notes = []
    if assigned is None:
        recorded = {tuple(r["assigned"]) for r in reports if isinstance(r.get("assigned"), list)}
        if len(recorded) > 1:
            notes.append("the reports were graded for different assignments: "
                         + "; ".join(", ".join(map(str, a)) for a in sorted(recorded)))
        if recorded:
            assigned = sorted({str(e) for a in recorded for e in a})
    if assigned is not None:
        unknown = [e for e in assigned if e not in IDS]
        if unknown:
            raise GradebookError(f"no exercise {', '.join(map(repr, unknown))}: choose from {', '.join(IDS)}")
        columns = sorted(set(assigned))
    else:
        columns = sorted({str(p.get("exercise")) for r in reports for p in r.get("exercises", [])
                          if isinstance(p, dict) and p.get("exercise") in IDS and p.get("status") != NOT_SUBMITTED})
    given = set(columns if assigned is not None else ())
    rows = [_row(r, columns, given) for r in reports]
    for folder in unsigned:
        rows.append(Row(visible(folder), folder, {}, 0.0, 0, ("its report is not one this grader signed: regrade it",),
                        "", signed=False))
    rows.sort(key=lambda r: (not r.signed, r.student, r.folder))
    return Gradebook(rows, columns, sorted(set(assigned)) if assigned is not None else None, notes)


# ---- reading the results folders ------------------------------------------------------------------

def _scores(report: dict[str, Any]) -> tuple:
    return (report.get("score"), tuple(sorted((str(p.get("exercise")), p.get("score"))
                                              for p in report.get("exercises", []) if isinstance(p, dict))))


def _signed_in(root: Path) -> tuple[dict[str, tuple[dict[str, Any], Path]], list[str]]:
    """One results folder's signed reports by student, and its folders with a report that does not
    verify. Of two reports of one student, the one in the folder the grader uses now counts (the
    other is left from a grader that named folders otherwise)."""
    key = _key(root, create=False)
    try:
        folders = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except OSError:
        return {}, []
    found: dict[str, tuple[dict[str, Any], Path]] = {}
    unsigned = []
    for folder in folders:
        if folder in OUTPUTS:
            continue
        report = load_report(root, folder, key)
        if report is None or report.get("folder") != folder:  # a signed report copied to another folder
            if (root / folder / REPORT).exists() or (root / folder / RESULTS).exists():
                unsigned.append(folder)
            continue
        student = str(report.get("student"))
        if student not in found or folder == folder_for(student):
            found[student] = (report, root / folder)
    return found, unsigned


def load_reports(result_dirs: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The signed reports in these results folders (shards merged), and the folders holding a
    report this grader did not sign. A student found in two shards with other scores is an error."""
    found: dict[str, tuple[dict[str, Any], Path]] = {}  # student -> (report, its folder)
    unsigned: list[str] = []
    for root in result_dirs:
        if not Path(root).is_dir():
            raise GradebookError(f"no such results folder: {root}")
        here, bad = _signed_in(Path(root))
        unsigned += bad
        for student, (report, where) in here.items():
            if student in found and _scores(found[student][0]) != _scores(report):
                raise GradebookError(
                    f"{visible(student)!r} was graded twice with different scores, in {found[student][1]} "
                    f"({found[student][0].get('score')}) and {where} ({report.get('score')}): a rerun with "
                    "another shard count? Delete the stale results folder and merge again")
            found.setdefault(student, (report, where))
    return [r for r, _ in found.values()], sorted(set(unsigned))
