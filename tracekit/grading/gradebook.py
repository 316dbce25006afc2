"""The class gradebook, made from the signed reports (classlist.py): `grades.csv` (a score per
exercise and per question), `canvas.csv` and `moodle.csv` (what those two LMSs import as they are),
`feedback/<folder>.md` for each student, and `summary.html` (summary.py).

Every file is a function of the reports alone (sorted, no clock), so two gradings of one class
give identical files. Student names and judge messages are hostile text: CSV cells cannot run as
formulas, the Markdown cannot link, embed or open HTML, and invisible characters are shown as
escapes so that names which only look alike stay apart.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import html
import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import GradebookError
from ..exercises import get
from .classlist import (
    CANVAS,
    FEEDBACK,
    GRADES,
    MOODLE,
    NOT_SUBMITTED,
    OUTPUTS,
    SUMMARY,
    TEXT_MOST,
    Gradebook,
    Part,
    Row,
    collect,
    load_reports,
    number,
    one_line,
    visible,
)
from .report import write_atomic
from .summary import summary_html

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_IDENTITY = "username"

__all__ = ["OUTPUTS", "Gradebook", "canvas_csv", "cell", "collect", "feedback_md", "grades_csv", "grades_text",
           "load_reports", "md", "moodle_csv", "moodle_warning", "summary_html", "visible", "write_from",
           "write_gradebook"]


def cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run as a formula."""
    if isinstance(value, (int, float)):
        return value
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r", "|") else text


def _text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= TEXT_MOST else text[:TEXT_MOST - 1] + "…"


def _csv(rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    cells = [["-" if c == "-" else cell(_text(c)) for c in row] for row in rows]  # a lone '-' is no formula
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


_MOODLE_USERNAME = re.compile(r"[a-z0-9_.@-]+")  # Moodle's PARAM_USERNAME without extended characters


def moodle_warning(book: Gradebook) -> str | None:
    """What to say when moodle.csv's identifier column holds names that cannot be Moodle usernames
    (a display name like "José María"): None when every one could be."""
    odd = [r.student for r in book.signed if not _MOODLE_USERNAME.fullmatch(r.student)]
    if not odd:
        return None
    shown = ", ".join(repr(n) for n in odd[:3]) + (f" and {len(odd) - 3} more" if len(odd) > 3 else "")
    return (f"moodle.csv: {len(odd)} of {len(book.signed)} names are not Moodle usernames ({shown}): Moodle matches "
            "rows by username (lower case, no spaces), so those rows will not import; name each submission by "
            "the student's Moodle username, or map the column to a user field that holds these names")


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


_MD_SPECIAL = re.compile(r"([\\<>&\[\]!`])")
# what a Markdown viewer turns into a link without brackets: a scheme (https://, mailto:), www., an
# e-mail address, and (linkify's fuzzy links) a dotted name ending in letters, like evil.com/login
_BARE_LINK = re.compile(r"(?:[a-z][a-z0-9+.-]*://|(?:mailto|xmpp|tel|javascript|data|file):|www\d{0,3}\.)[^\s`]*"
                        r"|[^\s`@<>\[\]()]+@[^\s`@<>\[\]()]+"
                        r"|(?<![\w.])(?:[\w-]+\.)+[a-z]{2,}\b(?:[/:?#][^\s`]*)?", re.IGNORECASE)


def md(text: Any) -> str:
    """Text for Markdown that cannot open HTML, a link or an image: one line, invisible characters
    escaped, backslash before \\ < > & [ ] ! `, and whatever a viewer would autolink (a bare URL, an
    e-mail address, a domain) set in a code span, where no viewer makes a link."""
    out, at = [], 0
    line = one_line(text)
    for found in _BARE_LINK.finditer(line):
        out.append(_MD_SPECIAL.sub(r"\\\1", line[at:found.start()]))
        out.append(f"`{found.group()}`")
        at = found.end()
    out.append(_MD_SPECIAL.sub(r"\\\1", line[at:]))
    return "".join(out)


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


# ---- writing --------------------------------------------------------------------------------------

def write_gradebook(reports: list[dict[str, Any]], out_dir: Path, assigned: list[str] | None = None,
                    unsigned: list[str] | tuple[str, ...] = ()) -> Gradebook:
    """Write grades.csv, canvas.csv, moodle.csv, feedback/<folder>.md and summary.html into out_dir
    (feedback files of students no longer in the class are removed)."""
    book = collect(reports, assigned, unsigned)
    warning = moodle_warning(book)
    if warning:
        book.notes.append(warning)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise GradebookError(f"{out_dir} is a file: give a folder for the gradebook, a .csv path or - (standard "
                             "output)")
    write_atomic(out_dir / GRADES, grades_csv(book), bom=True)  # the BOM: Excel reads the file as UTF-8
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


def write_from(result_dirs: list[Path], out_dir: Path, assigned: list[str] | None = None,
               warn: Callable[[str], None] | None = None) -> Gradebook:
    """Merge the results folders (shards) and write the gradebook into out_dir."""
    reports, unsigned = load_reports(result_dirs, warn)
    return write_gradebook(reports, out_dir, assigned, unsigned)


def grades_text(result_dirs: list[Path], assigned: list[str] | None = None,
                warn: Callable[[str], None] | None = None) -> str:
    """grades.csv of the merged results folders, as text (only reports this grader signed count,
    scores clamped to the exercises' points; a student graded twice with different scores is a
    GradesConflictError)."""
    reports, unsigned = load_reports(result_dirs, warn)
    return grades_csv(collect(reports, assigned, unsigned))
