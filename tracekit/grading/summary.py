"""summary.html: what an instructor reads before the next lecture — the class at a glance, a small
bar chart of the scores of each question, the most common wrong entries of each table question and
the most common messages, missing work, problems. One self-contained page: no script, and a policy
that forbids loading anything; every piece of text from a report is escaped.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

from ..exercises import get
from .classlist import NOT_SUBMITTED, Gradebook, number, shorten, what_was_wrong

_TOP = 5  # wrong entries and messages listed per question

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
    messages = Counter(kind for q in graded if q.score != points and q.message for kind in what_was_wrong(q.message))
    if messages:
        out.append("<p><b>Most common mistakes</b> (answers short of full marks; … stands for each student's "
                   "own inputs)</p>")
        common = sorted(messages.items(), key=lambda x: (-x[1], x[0]))[:_TOP]
        out.append(_table(["what was wrong", "students"], [[shorten(m, 300), n] for m, n in common], numeric=(1,)))
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
