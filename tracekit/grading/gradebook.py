"""The class gradebook, made from the signed reports: `grades.csv` (a score per exercise and per
question), `canvas.csv` and `moodle.csv` (what those two LMSs import as they are),
`feedback/<folder>.md` for each student and `summary.html` (score distributions, the most common
wrong entries, missing work, problems).

Every file is a function of the reports alone (sorted, no clock), so two gradings of one class
give identical files. Student names and judge messages are hostile text: each format escapes them
(CSV cells that cannot run as formulas, Markdown that cannot link, embed or open HTML, an HTML page
whose policy forbids scripts and network and that holds no markup of theirs), and invisible
characters are shown as escapes so that names which only look alike stay apart.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import html
import io
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GradebookError
from ..exercises import IDS, get
from .grader import REPORT, RESULTS, _cell, _clamp, _key, load_report, write_atomic

GRADES, CANVAS, MOODLE, SUMMARY, FEEDBACK = "grades.csv", "canvas.csv", "moodle.csv", "summary.html", "feedback"
OUTPUTS = (GRADES, CANVAS, MOODLE, SUMMARY, FEEDBACK)  # names no student's results folder may take
CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_IDENTITY = "username"
NOT_SUBMITTED = "not submitted"
_FOLDER = re.compile(r"[\w][\w .@+-]{0,99}")
_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_CELL_MOST = 2000  # characters of one text cell in a CSV
_TOP = 5  # wrong entries and messages listed per question


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
    if _FOLDER.fullmatch(folder) and not folder.endswith((".", " ")) and folder.lower() not in OUTPUTS:
        return folder
    return "student-" + hashlib.sha256(str(report.get("student", "")).encode()).hexdigest()[:12]


def _strings(value: Any, most: int = 100) -> tuple[str, ...]:
    return tuple(one_line(v)[:200] for v in value[:most]) if isinstance(value, list) else ()


def _question(q: dict[str, Any], points: int) -> Question:
    return Question(_clamp(q.get("score"), points), points, one_line(q.get("message", ""))[:_CELL_MOST],
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
                one_line(raw.get("notebook", ""))[:200], True, one_line(raw.get("problem") or "")[:_CELL_MOST],
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


def load_reports(result_dirs: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The signed reports in these results folders (shards merged), and the folders holding a
    report this grader did not sign. A student found twice with other scores is an error."""
    found: dict[str, tuple[dict[str, Any], Path]] = {}
    unsigned: list[str] = []
    for root in result_dirs:
        if not Path(root).is_dir():
            raise GradebookError(f"no such results folder: {root}")
        key = _key(root, create=False)
        try:
            folders = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for folder in folders:
            if folder in OUTPUTS:
                continue
            report = load_report(root, folder, key)
            if report is None or report.get("folder") != folder:  # a signed report copied to another folder
                if (root / folder / REPORT).exists() or (root / folder / RESULTS).exists():
                    unsigned.append(folder)
                continue
            student = str(report.get("student"))
            if student in found:
                other, where = found[student]
                if _scores(other) != _scores(report):
                    raise GradebookError(
                        f"{visible(student)!r} was graded twice with different scores, in {where / folder} "
                        f"({other.get('score')}) and {root / folder} ({report.get('score')}): a rerun with "
                        "another shard count? Delete the stale results folder and merge again")
                continue
            found[student] = (report, root)
    return [r for r, _ in found.values()], sorted(set(unsigned))


# ---- the files ------------------------------------------------------------------------------------

def _text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _CELL_MOST else text[:_CELL_MOST - 1] + "…"


def _csv(rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    cells = [["-" if c == "-" else _cell(_text(c)) for c in row] for row in rows]  # a lone '-' is no formula
    csv.writer(buf, lineterminator="\n").writerows(cells)
    return buf.getvalue()


def _title(exercise: str) -> str:
    return f"{exercise} {get(exercise).title}"


def grades_csv(book: Gradebook) -> str:
    """One row per student: score, max_score, a column per exercise and per question, problems, isolation."""
    questions = [(e, q.name) for e in book.columns for q in get(e).questions]
    rows: list[list[Any]] = [["student", "score", "max_score", *book.columns, *(f"{e}.{q}" for e, q in questions),
                              "problems", "isolation"]]
    for r in book.rows:
        cells = [r.student, number(r.score), r.max_score]
        if r.signed:
            cells += ["" if r.parts[e].score is None else number(r.parts[e].score) for e in book.columns]
            cells += ["" if (s := r.parts[e].questions[q].score) is None else number(s) for e, q in questions]
        else:
            cells += [""] * (len(book.columns) + len(questions))
        rows.append([*cells, "; ".join(r.problems), r.isolation])
    return _csv(rows)


def canvas_csv(book: Gradebook) -> str:
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, one column per
    exercise (a new assignment, or the one of that exact title), a Points Possible row, then the
    students (matched by SIS Login ID = the submission's name, else by name)."""
    rows: list[list[Any]] = [[*CANVAS_IDENTITY, *(_title(e) for e in book.columns)],
                             ["Points Possible", "", "", "", "", *(get(e).max_score for e in book.columns)]]
    for r in book.signed:
        rows.append([r.student, "", "", r.student, "",
                     *("" if r.parts[e].score is None else number(r.parts[e].score) for e in book.columns)])
    return _csv(rows)


def _feedback_line(part: Part) -> str:
    if not part.submitted:
        return NOT_SUBMITTED
    lines = [f"{name} {number(q.score or 0)}/{q.points}: {q.message}" for name, q in part.questions.items()]
    if part.problem:
        lines.append(part.problem)
    return html.escape("; ".join(lines), quote=False)


def moodle_csv(book: Gradebook) -> str:
    """Moodle's CSV grade import: an identifier column (map it to the username), then per exercise
    a grade column and a feedback column; '-' where there is no grade."""
    header = [MOODLE_IDENTITY]
    for e in book.columns:
        header += [_title(e), f"Feedback: {_title(e)}"]
    rows: list[list[Any]] = [header]
    for r in book.signed:
        cells = [r.student]
        for e in book.columns:
            part = r.parts[e]
            graded = part.score is not None
            cells += [number(part.score) if graded else "-", _feedback_line(part) if graded else ""]
        rows.append(cells)
    return _csv(rows)


_MD_SPECIAL = re.compile(r"([\\<>&\[\]!])")


def md(text: Any) -> str:
    """Text for Markdown that cannot open HTML, a link or an image: one line, invisible characters
    escaped, and backslash before \\ < > & [ ] !"""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text))


def feedback_md(row: Row, book: Gradebook) -> str:
    """A student's feedback: each exercise and question with its score and the judge's message,
    what was not submitted, and the problems."""
    lines = [f"# Feedback for {md(row.student)}", "",
             f"**Total: {number(row.score)} / {row.max_score} points**"
             + (f" (assignment: {', '.join(book.assigned)})" if book.assigned else ""), ""]
    for e, part in row.parts.items():
        title = md(f"{e} · {get(e).title}")
        if not part.submitted:
            lines += [f"## {title}: {NOT_SUBMITTED}" + (f" (0 / {part.max_score})" if part.score is not None else ""),
                      "", "No notebook for this exercise was found in your submission.", ""]
            continue
        lines += [f"## {title}: {number(part.score or 0)} / {part.max_score}", ""]
        if part.notebook:
            lines.append(f"Graded notebook: {md(part.notebook)}" + (f" (inputs drawn with seed {md(part.seed)})"
                                                                    if part.seed else ""))
            lines.append("")
        for name, q in part.questions.items():
            mark = "✓" if q.score == q.points else ("~" if q.score else "✗")
            prompt = next(x.prompt for x in get(e).questions if x.name == name)
            lines.append(f"- {mark} **{name}** ({number(q.score or 0)}/{q.points}) {md(prompt)}")
            if q.message and q.message != "correct":
                lines.append(f"  - {md(q.message)}")
            if q.wrong:
                lines.append(f"  - wrong entries: {md(', '.join(q.wrong))}")
        if part.problem:
            lines += ["", f"Problem: {md(part.problem)}"]
        if part.notes:
            lines += ["", "What happened while your notebook ran:"] + [f"- {md(n)}" for n in part.notes]
        lines.append("")
    if row.problems:
        lines += ["## Problems", ""] + [f"- {md(p)}" for p in row.problems] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---- summary.html ---------------------------------------------------------------------------------

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #1b1b1b; }}
h1 {{ font-size: 1.6em; }} h2 {{ margin-top: 2em; border-bottom: 1px solid #ccc; }} h3 {{ margin-bottom: .3em; }}
table {{ border-collapse: collapse; margin: .5em 0; }}
td, th {{ border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }}
th {{ background: #f4f4f4; }} td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
.questions {{ display: flex; flex-wrap: wrap; gap: 1.5em; }}
.question {{ box-sizing: border-box; border: 1px solid #ddd; border-radius: 6px; padding: .6em .9em;
             max-width: calc(50% - .75em); }}
.question p {{ margin: .2em 0; }} .muted {{ color: #666; }} code {{ overflow-wrap: anywhere; }}
svg.chart text {{ font: 11px system-ui, sans-serif; fill: #333; }}
</style></head><body>
{body}
</body></html>
"""
_COLOURS = {"zero": "#d9534f", "partial": "#f0ad4e", "full": "#5cb85c", "missing": "#9e9e9e"}


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _bins(values: list[float], points: int) -> list[tuple[str, int, str]]:
    """(label, count, kind) bars: each score that occurs (and 0 and full marks), or ten ranges."""
    distinct = sorted(set(values) | {0.0, float(points)})
    if len(distinct) <= 11:
        counts = Counter(values)
        return [(number(v), counts[v], "zero" if v == 0 else "full" if v == points else "partial") for v in distinct]
    width = points / 10
    bars = []
    for i in range(10):
        lo, hi = i * width, (i + 1) * width
        n = sum(1 for v in values if lo <= v < hi or (i == 9 and v == hi))
        bars.append((f"{number(lo)}–{number(hi)}", n, "zero" if i == 0 else "full" if i == 9 else "partial"))
    return bars


def chart(bars: list[tuple[str, int, str]], label: str) -> str:
    """A small inline SVG bar chart: one bar per (label, count, kind)."""
    most = max([n for _, n, _ in bars] + [1])
    step = max(44, 7 * max(len(text) for text, _, _ in bars) + 10) if bars else 44  # room for the labels
    bar, top, height = step - 12, 18, 80
    width = 12 + step * len(bars)
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 34}" '
             f'viewBox="0 0 {width} {top + height + 34}" role="img" aria-label="{_e(label)}">']
    for i, (text, n, kind) in enumerate(bars):
        x = 8 + i * step
        h = round(height * n / most, 1)
        y = top + height - h
        parts.append(f'<rect x="{x}" y="{y}" width="{bar}" height="{max(h, 1)}" fill="{_COLOURS[kind]}">'
                     f'<title>{n} × {_e(text)}</title></rect>')
        parts.append(f'<text x="{x + bar / 2}" y="{y - 4}" text-anchor="middle">{n}</text>')
        parts.append(f'<text x="{x + bar / 2}" y="{top + height + 14}" text-anchor="middle">{_e(text)}</text>')
    parts.append(f'<line x1="4" y1="{top + height + 0.5}" x2="{width - 4}" y2="{top + height + 0.5}" stroke="#999"/>')
    parts.append("</svg>")
    return "".join(parts)


def _table(header: list[str], rows: list[list[Any]], numeric: tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="n">{_e(c)}</td>' if i in numeric else f"<td>{_e(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _question_box(book: Gradebook, exercise: str, name: str, prompt: str, points: int) -> str:
    graded = [r.parts[exercise].questions[name] for r in book.signed if r.parts[exercise].submitted]
    missing = sum(1 for r in book.signed if not r.parts[exercise].submitted)
    values = [q.score or 0.0 for q in graded]
    bars = _bins(values, points) + ([(NOT_SUBMITTED, missing, "missing")] if missing else [])
    mean = sum(values) / len(values) if values else 0.0
    full = sum(1 for v in values if v == points)
    out = [f'<div class="question" id="{_e(exercise)}-{_e(name)}"><h3>{_e(exercise)} {_e(name)} '
           f'<span class="muted">({points} point{"s" if points != 1 else ""})</span></h3>',
           f"<p>{_e(prompt)}</p>",
           chart(bars, f"{exercise} {name}: scores of {len(values)} students"),
           f"<p>{len(values)} graded · mean {number(mean)} / {points} · full marks {full}"
           + (f" · {missing} {NOT_SUBMITTED}" if missing else "") + "</p>"]
    wrong = Counter(w for q in graded for w in set(q.wrong))
    if wrong:
        out.append("<p><b>Most common wrong entries</b></p>")
        out.append(_table(["entry", "students"], [[w, n] for w, n in sorted(wrong.items(), key=lambda x: (-x[1], x[0]))
                                                  [:_TOP]], numeric=(1,)))
    messages = Counter(q.message for q in graded if q.score != points and q.message)
    if messages:
        out.append("<p><b>Most common messages</b> (answers short of full marks)</p>")
        out.append(_table(["message", "students"], [[m[:300], n] for m, n in
                                                    sorted(messages.items(), key=lambda x: (-x[1], x[0]))[:_TOP]],
                          numeric=(1,)))
    out.append("</div>")
    return "".join(out)


def summary_html(book: Gradebook) -> str:
    """The page an instructor reads before the next lecture: the class at a glance, per-question
    score distributions, the most common wrong entries, missing work, problems."""
    rows = book.signed
    body = ["<h1>tracekit gradebook</h1>"]
    what = (f"assignment: {', '.join(book.assigned)}" if book.assigned is not None
            else "no assignment given (columns: every exercise someone submitted; pass --exercises to grade for one)")
    scores = [r.score for r in rows]
    mean = sum(scores) / len(scores) if scores else 0.0
    most = max((r.max_score for r in rows), default=0)
    body.append(f"<p>{len(rows)} students graded · {_e(what)} · mean total {number(mean)} / {most}"
                + (f" · {len(book.rows) - len(rows)} results folders with a report this grader did not sign"
                   if len(book.rows) > len(rows) else "") + "</p>")
    body += [f"<p><b>Note:</b> {_e(n)}</p>" for n in book.notes]
    overview = []
    for e in book.columns:
        done = [r.parts[e].score or 0.0 for r in rows if r.parts[e].submitted]
        overview.append([f"{e} {get(e).title}", len(done), sum(1 for r in rows if not r.parts[e].submitted),
                         number(sum(done) / len(done)) if done else "", get(e).max_score,
                         sum(1 for v in done if v == get(e).max_score)])
    body.append("<h2>Exercises</h2>")
    body.append(_table(["exercise", "submitted", NOT_SUBMITTED, "mean", "points", "full marks"], overview,
                       numeric=(1, 2, 3, 4, 5)))
    totals = _bins(scores, most) if rows else []
    if totals:
        body.append(f"<h3>Totals</h3>{chart(totals, f'totals of {len(rows)} students')}")
    missing = [[r.student, ", ".join(r.missing)] for r in rows if r.missing]
    body.append("<h2>Missing work</h2>")
    body.append(_table(["student", "no notebook for"], missing) if missing
                else "<p>Everyone submitted every exercise.</p>")
    for e in book.columns:
        body.append(f'<h2 id="{_e(e)}">{_e(e)} · {_e(get(e).title)}</h2><div class="questions">')
        body += [_question_box(book, e, q.name, q.prompt, q.points) for q in get(e).questions]
        body.append("</div>")
    problems = [[r.student, p] for r in book.rows for p in r.problems if not p.startswith(NOT_SUBMITTED)]
    body.append("<h2>Problems</h2>")
    body.append(_table(["student", "problem"], problems) if problems else "<p>None.</p>")
    isolation = Counter(r.isolation for r in rows)
    body.append("<h2>Isolation</h2>")
    body.append(_table(["isolation", "students"], sorted(isolation.items()), numeric=(1,)))
    return _PAGE.format(title="tracekit gradebook", body="\n".join(body))


# ---- writing --------------------------------------------------------------------------------------

def write_gradebook(reports: list[dict[str, Any]], out_dir: Path, assigned: list[str] | None = None,
                    unsigned: list[str] | tuple[str, ...] = ()) -> Gradebook:
    """Write grades.csv, canvas.csv, moodle.csv, feedback/<folder>.md and summary.html into out_dir
    (feedback files of students no longer in the class are removed)."""
    book = collect(reports, assigned, unsigned)
    out_dir = Path(out_dir)
    write_atomic(out_dir / GRADES, grades_csv(book))
    write_atomic(out_dir / CANVAS, canvas_csv(book))
    write_atomic(out_dir / MOODLE, moodle_csv(book))
    names = set()
    for row in book.signed:
        name = f"{row.folder}.md"
        if name in names:  # two reports claim one folder: keep both, apart
            name = f"student-{hashlib.sha256((row.student + row.folder).encode()).hexdigest()[:12]}.md"
        names.add(name)
        write_atomic(out_dir / FEEDBACK / name, feedback_md(row, book))
    with contextlib.suppress(OSError):
        for entry in os.scandir(out_dir / FEEDBACK):
            if entry.name.endswith(".md") and entry.name not in names and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
    write_atomic(out_dir / SUMMARY, summary_html(book))
    return book


def write_from(result_dirs: list[Path], out_dir: Path, assigned: list[str] | None = None) -> Gradebook:
    """Merge the results folders (shards) and write the gradebook into out_dir."""
    reports, unsigned = load_reports(result_dirs)
    return write_gradebook(reports, out_dir, assigned, unsigned)


def grades_text(result_dirs: list[Path], assigned: list[str] | None = None) -> str:
    """grades.csv of the merged results folders, as text."""
    reports, unsigned = load_reports(result_dirs)
    return grades_csv(collect(reports, assigned, unsigned))
