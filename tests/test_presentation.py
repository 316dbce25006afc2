"""The shared presentation helpers: aligned text, the one HTML table, the score report."""

import html
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tracekit as tk
from tracekit import exercises
from tracekit.exercises import score_text
from tracekit.render.table import aligned, html_table

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def _cells(table: str) -> list[list[str]]:
    """Every row of an HTML table (header rows included) as unescaped cell texts."""
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
    return [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]


def test_aligned_pads_each_column_to_its_widest_cell_and_strips_the_line_ends():
    text = aligned(("a", "long header"), [("wide cell", "x"), ("b", "")], indent="  ")
    assert text.split("\n") == ["  a          long header", "  wide cell  x", "  b"]
    assert aligned(("only", "headers"), []) == "only  headers"


@given(st.lists(st.tuples(TEXT, TEXT, TEXT), max_size=5), st.tuples(TEXT, TEXT, TEXT))
def test_html_table_escapes_every_cell_and_keeps_the_text(rows, columns):
    table = html_table(columns, rows)
    assert _cells(table) == [list(columns)] + [list(r) for r in rows]  # a tag in a cell would split it


def test_html_table_row_headers_caption_definitions_class_and_highlight():
    table = html_table(("", "cpu"), [("fact <1>", "a & b"), ("other", "c")], "one\ntwo <lines>",
                       row_headers=True, definitions=[("term", "what it <means>")], css_class="x'y",
                       highlight={1})
    assert table.startswith("<table class='x&#x27;y'><caption style='text-align:left'>one<br>two &lt;lines&gt;"
                            "</caption>")
    assert "<tr><td colspan='2' style='text-align:left'><ul style='margin:0'><li><b>term</b>: what it " \
           "&lt;means&gt;</li></ul></td></tr>" in table
    assert "<tr><th style='text-align:left'>fact &lt;1&gt;</th><td style='text-align:left'>a &amp; b</td></tr>" in table
    assert "<tr style='background:#ffe08a'><th style='text-align:left'>other</th>" in table
    one_line = html_table(("a",), [("b",)], "a caption")
    assert "<caption>a caption</caption>" in one_line and "<ul" not in one_line and "<th style" not in one_line


def test_every_tracekit_table_is_the_one_html_table():
    """Trace tables, diffs, scenario results and budgets all print through html_table."""
    x = torch.randn(3, requires_grad=True)
    trace = tk.trace((x.exp() * x).sum())
    table = trace.table()
    assert table._repr_html_() == html_table(table.columns, table.rows, table.caption, wrap=table.wraps)
    result = tk.ScenarioResult("s", "cpu", {"a <b>": "1 & 2"})
    assert _cells(result._repr_html_()) == [["", "cpu"], ["a <b>", "1 & 2"]]
    budget = tk.budget(device="meta")
    cells = _cells(budget._repr_html_())
    assert cells[1] == ["category", "start", "at the peak", "end", "own peak"]
    assert cells[2:] == [list(r) for r in budget.table_rows()]


QUESTIONS = [
    {"name": "a", "prompt": "full", "score": 2, "max_score": 2, "message": "correct"},
    {"name": "b", "prompt": "part", "score": 0.5, "max_score": 2, "message": "look at b"},
    {"name": "c", "prompt": "none", "score": 0, "max_score": 1, "message": "define `c`"},
    {"name": "d", "prompt": "full, noted", "score": 1, "max_score": 1, "message": "correct; note"},
]


def test_score_text_marks_full_partial_and_none_and_says_what_to_fix():
    assert score_text("ex01", "Title", 3.5, 6, QUESTIONS).split("\n") == [
        "ex01 · Title: 3.5 / 6 points",
        "  ✓ a (2/2) full",
        "  ~ b (0.5/2) part",
        "      look at b",
        "  ✗ c (0/1) none",
        "      define `c`",
        "  ✓ d (1/1) full, noted",
        "      correct; note",
    ]


@pytest.mark.parametrize("exercise_id", ["ex01", "ex03"])
def test_check_prints_the_score_text_of_its_results(exercise_id, capsys):
    ex = exercises.get(exercise_id)
    results = exercises.check(exercise_id, namespace={}, seed=1)
    assert capsys.readouterr().out == score_text(ex.id, ex.title, 0, ex.max_score, results) + "\n" + \
        exercises.SELF_CHECK_NOTE + "\n"
    assert all(r["status"] == "missing" for r in results)
