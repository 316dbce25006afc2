"""The gradebook of a class of 30 (issue 27): grades.csv, canvas.csv, moodle.csv, feedback/ and
summary.html, from signed reports written the way the grader writes them, with resubmissions,
missing work, hostile names and hostile messages. The Canvas and Moodle files are checked against
the rules their importers apply (see README, "The gradebook"); summary.html also in a real browser."""

import csv
import html.parser
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import GradebookError
from tracekit.exercises import get
from tracekit.grading import classlist, gradebook
from tracekit.grading.grader import _key, folder_for, in_shard, make_report, write_report
from tracekit.grading.report import StudentReport

ASSIGNED = ["ex01", "ex02", "ex03"]
FAMILY = [f"p{i}" for i in range(1, 7)]
HOSTILE_NAMES = ["eve", "eve\u200b", "mallory\x1b[31m", '=HYPERLINK("http://evil.example","click")',
                 "<script>alert(1)</script>", "rtl\u202egnp.exe", "José", "-2+3"]
NAMES = [f"student{i:02d}" for i in range(1, 23)] + HOSTILE_NAMES
INJECTION = ('<img src=x onerror=alert(1)> =1+1 [click](http://evil.example) ![p](http://evil.example/p.png)'
             ' bare https://evil.example/login?next=1 www.evil.example mail help@evil.example evil.example/reset'
             ' <https://evil.example/auto> mailto:help@evil.example'
             '\n# not a heading\t<script>alert(2)</script>')
NUMBER = re.compile(r"\d+(\.\d{1,2})?")


def question(q, fraction, message=None, wrong=None):
    entry = {"name": q.name, "prompt": q.prompt, "score": round(q.points * fraction, 2), "max_score": q.points,
             "message": message or ("correct" if fraction == 1 else f"{q.name}: look again"),
             "status": "correct" if fraction == 1 else "partial" if fraction else "wrong"}
    if wrong is not None:
        entry["wrong"] = wrong
    return entry


def part(exercise, questions, notebook=None, seed=None, problem=None, cell_errors=()):
    ex = get(exercise)
    entry = {"notebook": notebook or f"{ex.notebook}.ipynb", "exercise": exercise, "title": ex.title,
             "score": round(sum(q["score"] for q in questions), 2), "max_score": ex.max_score,
             "questions": questions,
             "sandbox": {"seconds": 1.0, "notes": [], "cell_errors": list(cell_errors), "tampered": [],
                         "isolation": "isolation: full"}}
    if seed is not None:
        entry["seed"] = seed
    if problem:
        entry["problem"] = problem
    return entry


def not_submitted(exercise):
    ex = get(exercise)
    return {"notebook": None, "exercise": exercise, "title": ex.title, "score": 0, "max_score": ex.max_score,
            "questions": [], "status": "not submitted"}


def sign(out: Path, report: dict | StudentReport) -> StudentReport:
    raw = report.to_json() if isinstance(report, StudentReport) else dict(report)
    raw.pop("signature", None)
    raw["isolation"] = "isolation: full (test)"  # the same on every machine
    raw["assigned"] = list(ASSIGNED)
    typed = StudentReport.from_json(raw)
    write_report(out, typed, _key(out, create=True))
    return typed


def draw_class(seed: int = 27):
    """30 students' reports and what the gradebook must say of each: {name: {column: value}}."""
    rng = random.Random(seed)
    reports, expected = {}, {}
    for index, name in enumerate(NAMES):
        parts, cells, problems = [], {}, []
        for exercise in ASSIGNED:
            ex = get(exercise)
            if exercise == "ex03" and name in ("student20", "student21", "student22"):
                parts.append(not_submitted(exercise))  # what the grader writes for assigned work with no notebook
            if exercise == "ex03" and name in ("student19", "student20", "student21", "student22"):
                cells.update({exercise: 0, **{f"{exercise}.{q.name}": 0 for q in ex.questions}})
                continue  # student19: an older report with no entry at all for ex03
            questions = []
            for q in ex.questions:
                table = q.draw.__name__ == "draw"  # a table question: three cases drawn from FAMILY
                if table:
                    right = rng.randrange(4)
                    wrong = (["p4"] + rng.sample([c for c in FAMILY if c != "p4"], 2))[:3 - right]
                    fraction = right / 3
                    questions.append(question(q, fraction, f"{', '.join(map(repr, wrong))}: look again"
                                              if wrong else None, wrong))
                else:
                    fraction = rng.choice([0, 0.5, 1])
                    message = INJECTION if (name == "student03" and q.name == "q3") else None
                    questions.append(question(q, fraction, message))
                cells[f"{exercise}.{q.name}"] = round(q.points * fraction, 2)
            parts.append(part(exercise, questions, seed=1000 + index,
                              cell_errors=["cell 4: ZeroDivisionError: <b>division</b> =by zero"]
                              if name == "student03" else ()))
            cells[exercise] = parts[-1]["score"]
        if name in HOSTILE_NAMES[2:6]:
            problems.append(f"{name}.ipynb: <b>not graded</b> =cmd|' /C calc'!A0")
        if name == "student06":
            problems.append("copy.ipynb: another notebook for ex01 (ex01.ipynb) was graded; "
                            "one notebook per exercise counts")
        report = make_report(name, parts, problems, 3.0)
        reports[name] = report
        cells["score"] = round(sum(cells[e] for e in ASSIGNED), 2)
        cells["max_score"] = sum(get(e).max_score for e in ASSIGNED)
        expected[name] = cells
    return reports, expected


def write_class(out: Path, names=None):
    reports, expected = draw_class()
    for name in names or NAMES:
        sign(out, reports[name])
    return reports, expected


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """The class graded in one results folder, a resubmission graded after, a forged report, and
    the gradebook written from the folder as grade_all writes it."""
    out = tmp_path_factory.mktemp("results")
    reports, expected = write_class(out)
    first = gradebook.write_from([out], out)
    before = (out / "feedback" / "student05.md").read_text(encoding="utf-8")
    # student05 resubmits: regraded with every question right
    fixed = [part(e, [question(q, 1) for q in get(e).questions]) for e in ASSIGNED]
    sign(out, make_report("student05", fixed, [], 2.0))
    expected["student05"] = {**{e: get(e).max_score for e in ASSIGNED},
                             **{f"{e}.{q.name}": q.points for e in ASSIGNED for q in get(e).questions},
                             "score": 15, "max_score": 15}
    (out / "forged").mkdir()
    (out / "forged" / "report.json").write_text(json.dumps({"student": "forged", "score": 99, "signature": "0" * 64}))
    (out / "feedback" / "gone.md").write_text("a student no longer in the class")
    book = gradebook.write_from([out], out)
    return {"out": out, "reports": reports, "expected": expected, "book": book, "first": first,
            "before": before}


def read_csv(path: Path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8-sig")
    return list(csv.reader(io.StringIO(text)))


def test_grades_csv_has_a_column_per_exercise_and_question(klass):
    rows = read_csv(klass["out"] / "grades.csv")
    questions = [f"{e}.{q.name}" for e in ASSIGNED for q in get(e).questions]
    assert rows[0] == ["student", "score", "max_score", *ASSIGNED, *questions, "problems", "isolation"]
    assert len(questions) == 3 + 3 + 2
    body = {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}
    assert len(rows) == 1 + 30 + 1 and len(body) == 31  # every student once, and the forged folder
    for name, cells in klass["expected"].items():
        row = body[gradebook.visible(name) if not name.startswith(("=", "-")) else "'" + name]
        for column, value in cells.items():
            assert float(row[column]) == pytest.approx(value, abs=0.005), (name, column)
        assert row["isolation"] == "full"
    assert body["student05"]["score"] == "15"  # the resubmission, not the first grading
    for name in ("student19", "student20", "student21", "student22"):
        assert body[name]["ex03"] == "0" and "not submitted: ex03" in body[name]["problems"]
    assert "one notebook per exercise counts" in body["student06"]["problems"]
    assert body["forged"]["problems"] == "its report is not one this grader signed: regrade it"
    assert rows[-1][0] == "forged"  # unsigned folders last; the students sorted by name


def test_hostile_names_stay_apart_and_no_cell_is_a_formula(klass):
    rows = read_csv(klass["out"] / "grades.csv")
    names = [r[0] for r in rows[1:]]
    assert "eve" in names and "eve\\u200b" in names  # the look-alike is its own row, its zero-width char shown
    assert "mallory\\x1b[31m" in names and "rtl\\u202egnp.exe" in names and "José" in names
    assert "'=HYPERLINK(\"http://evil.example\",\"click\")" in names and "'-2+3" in names
    for path in ("grades.csv", "canvas.csv", "moodle.csv"):
        for row in read_csv(klass["out"] / path):
            for cell in row:
                assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r", "|") or cell == "-", (path, cell)
                assert not re.search(r"[\x00-\x1f\x7f\u200b\u202e]", cell), (path, cell)


def test_two_gradings_and_a_merge_of_shards_give_identical_files(klass, tmp_path):
    again = tmp_path / "again"
    shutil.copytree(klass["out"], again)
    gradebook.write_from([again], again)
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    reports, _ = draw_class()
    for i, shard in enumerate(shards, 1):
        names = [n for n in NAMES if in_shard(n, (i, 2))]
        assert 5 < len(names) < 25
        for name in names:
            sign(shard, reports[name])
    single = tmp_path / "single"
    write_class(single)
    merged, whole = tmp_path / "merged", tmp_path / "whole"
    gradebook.write_from(shards, merged)
    gradebook.write_from([single], whole)
    for name in ("grades.csv", "canvas.csv", "moodle.csv", "summary.html"):
        assert (again / name).read_bytes() == (klass["out"] / name).read_bytes(), name
        assert (merged / name).read_bytes() == (whole / name).read_bytes(), name
    assert sorted(os.listdir(merged / "feedback")) == sorted(os.listdir(whole / "feedback"))
    assert len(os.listdir(whole / "feedback")) == 30


def test_a_student_graded_twice_with_other_scores_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    reports, _ = write_class(a, ["student01", "student02"])
    sign(b, reports["student02"].to_json())  # the same result in a second shard: merged once
    book = gradebook.write_from([a, b], tmp_path / "out")
    assert [r.student for r in book.signed] == ["student01", "student02"]
    other = reports["student01"].to_json()
    other.pop("signature", None)
    other["score"] = 0
    sign(b, other)
    with pytest.raises(GradebookError, match="'student01' was graded twice with different scores"):
        gradebook.write_from([a, b], tmp_path / "out")
    stale = json.loads(json.dumps(other))
    stale.pop("signature", None)
    stale["folder"] = "student01-old"  # left by a grader that named folders otherwise: the current one counts
    stale["exercises"] = [part(e, [question(q, 0) for q in get(e).questions]) for e in ASSIGNED]
    assert reports["student01"]["score"] > 0
    sign(a, stale)
    assert next(r for r in gradebook.write_from([a], tmp_path / "out").rows if r.student == "student01").score \
        == reports["student01"]["score"]
    with pytest.raises(GradebookError, match="no such results folder"):
        gradebook.write_from([tmp_path / "nope"], tmp_path / "out")


def test_canvas_csv_is_what_the_canvas_importer_reads(klass):
    """Canvas's GradebookImporter: a header whose columns 0-4 are Student, ID, SIS User ID, SIS Login
    ID, Section; assignment columns after them ("Title" or "Title (id)"; trailing Current/Final
    Score/Points/Grade columns are dropped, so none may be named so); a row whose first cell matches
    /Points Possible/; then one row per student, found by ID, SIS User ID, SIS Login ID or name."""
    rows = read_csv(klass["out"] / "canvas.csv")
    header, points = rows[0], rows[1]
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert re.search("Student", header[0]) and re.search("ID", header[1])
    assert re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3])
    assert re.search("Section", header[4])
    titles = header[5:]
    assert titles == [f"{e} {get(e).title}" for e in ASSIGNED]
    for title in titles:
        assert not re.search(r"Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade",
                             title)
        assert not re.search(r"\(\d+\)\s*$", title)  # would be read as an existing assignment's id
    assert re.search("Points Possible", points[0]) and points[1:5] == ["", "", "", ""]
    assert [float(p) for p in points[5:]] == [get(e).max_score for e in ASSIGNED]
    students = rows[2:]
    assert len(students) == 30  # the forged folder has no grades: not in an LMS file
    logins = [r[3] for r in students]
    assert len(set(logins)) == 30 and all(logins)
    for row in students:
        assert len(row) == len(header) and row[1] == row[2] == row[4] == ""
        for cell, most in zip(row[5:], points[5:]):
            assert NUMBER.fullmatch(cell) and 0 <= float(cell) <= float(most), row
    by_login = {r[3]: r for r in students}
    assert by_login["student05"][5:] == ["5", "6", "4"]
    assert by_login["student20"][7] == "0"  # assigned, not submitted


def test_moodle_csv_is_what_the_moodle_importer_reads(klass):
    """Moodle's gradeimport_csv: a header of unique column names; every row as many fields; one
    column mapped to a user field (here `username`; a blank or unknown value stops the import); a
    grade is a number (at most 100 by default) or '-' / '' for none; feedback columns are text."""
    rows = read_csv(klass["out"] / "moodle.csv")
    header = rows[0]
    assert header[0] == "username" and len(set(header)) == len(header)
    expected = ["username"]
    for e in ASSIGNED:
        expected += [f"{e} {get(e).title}", f"Feedback: {e} {get(e).title}"]
    assert header == expected
    assert len(rows) == 31
    names = [r[0] for r in rows[1:]]
    assert len(set(names)) == 30 and all(names)
    for row in rows[1:]:
        assert len(row) == len(header)
        for i in range(1, len(header), 2):
            assert NUMBER.fullmatch(row[i]) or row[i] == "-", row
            assert row[i] == "-" or float(row[i]) <= 100
            assert "<" not in row[i + 1] and "\n" not in row[i + 1]
    student20 = dict(zip(header, next(r for r in rows if r[0] == "student20")))
    assert student20[f"ex03 {get('ex03').title}"] == "0"
    assert student20[f"Feedback: ex03 {get('ex03').title}"] == "not submitted"
    student03 = dict(zip(header, next(r for r in rows if r[0] == "student03")))
    assert "&lt;img src=x onerror=alert(1)&gt;" in student03[f"Feedback: ex01 {get('ex01').title}"]


def test_each_student_gets_feedback_with_every_question(klass):
    out, book = klass["out"], klass["book"]
    files = sorted(os.listdir(out / "feedback"))
    assert files == sorted(f"{folder_for(n)}.md" for n in NAMES)  # gone.md (no such student) was removed
    text = (out / "feedback" / "student03.md").read_text(encoding="utf-8")
    row = next(r for r in book.signed if r.student == "student03")
    for e in ASSIGNED:
        assert f"## {e} · {get(e).title}: {gradebook.number(row.parts[e].score)} / {get(e).max_score}" in text
        for q in get(e).questions:
            got = row.parts[e].questions[q.name]
            assert f"**{q.name}** ({gradebook.number(got.score)}/{q.points})" in text
    assert "inputs drawn with seed 1002" in text
    # the hostile message: on one line, no HTML, link or image can open
    line = next(x for x in text.splitlines() if "onerror" in x)
    assert "\\<img src=x onerror=alert(1)\\>" in line and "\\[click\\](`http://evil.example)`" in line
    assert "\\!\\[p\\]" in line and "/ # not a heading" in line and "<" not in line.replace("\\<", "")
    # bare URLs, e-mail addresses and domains too: a renderer with GFM's autolinks makes no link of any
    import mistune

    render = mistune.create_markdown(plugins=["url", "table", "strikethrough"])
    assert "<a " in render(INJECTION.replace("\n", " "))  # the raw text would open links in such a viewer
    for shown in (text, hostile_feedback(out)):
        page = render(shown)
        assert "<a " not in page and "href" not in page and "<img" not in page and "<script" not in page, page
    assert "`https://evil.example/login?next=1`" in line and "`help@evil.example`" in line
    assert "ZeroDivisionError: \\<b\\>division\\</b\\>" in text
    missing = (out / "feedback" / "student20.md").read_text(encoding="utf-8")
    assert "## ex03 · What a graph really pins: not submitted (0 / 4)" in missing
    assert "- not submitted: ex03" in missing
    assert klass["before"] != (out / "feedback" / "student05.md").read_text(encoding="utf-8")
    assert "**Total: 15 / 15 points**" in (out / "feedback" / "student05.md").read_text(encoding="utf-8")
    hostile = (out / "feedback" / f"{folder_for('<script>alert(1)</script>')}.md").read_text(encoding="utf-8")
    assert hostile.startswith("# Feedback for \\<script\\>alert(1)\\</script\\>\n")
    assert folder_for("eve\u200b") != "eve" and (out / "feedback" / f"{folder_for('eve')}.md").exists()


def hostile_feedback(out) -> str:
    """The feedback of the student whose name is a script tag."""
    return (out / "feedback" / f"{folder_for('<script>alert(1)</script>')}.md").read_text(encoding="utf-8")


class Page(html.parser.HTMLParser):
    """Every tag and attribute of the page, and its text."""

    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_summary_html_escapes_everything_and_says_what_matters(klass):
    source = (klass["out"] / "summary.html").read_text(encoding="utf-8")
    page = Page()
    page.feed(source)
    tags = [t for t, _ in page.tags]
    assert "script" not in tags and "img" not in tags and "iframe" not in tags and "a" not in tags
    for tag, attrs in page.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        for key in ("src", "href"):
            assert key not in attrs, (tag, attrs)
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"]
    text = "".join(page.text)
    assert "<script>alert(1)</script>" in text and "<script>alert(1)</script>.ipynb: <b>not graded</b>" in text
    # student03's message, among the most common mistakes (its numbers shown as …): as text
    assert "<img src=x onerror=alert(…)>" in text
    questions = sum(len(get(e).questions) for e in ASSIGNED)
    assert tags.count("svg") == questions + 1  # one chart per question and one of the totals
    # the most common wrong entry of each table question is p4 (drawn wrong in every wrong answer)
    reports = [r for r in klass["book"].signed]
    for e in ASSIGNED:
        for q in get(e).questions:
            counts = {}
            for r in reports:
                for w in r.parts[e].questions[q.name].wrong:
                    counts[w] = counts.get(w, 0) + 1
            if not counts:
                continue
            assert max(counts, key=counts.get) == "p4"
            box = source[source.index(f'id="{e}-{q.name}"'):]
            box = box[:box.index("</div>")]
            assert f"<tr><td>p4</td><td class=\"n\">{counts['p4']}</td></tr>" in box
    missing = source[source.index("<h2>Missing work</h2>"):]
    missing = missing[:missing.index("<h2", 5)]
    for name in ("student19", "student20", "student21", "student22"):
        assert f"<tr><td>{name}</td><td>ex03</td></tr>" in missing
    assert "one notebook per exercise counts" in text and "its report is not one this grader signed" in text


def test_no_output_name_can_be_a_students_results_folder():
    for name in gradebook.OUTPUTS:
        assert folder_for(name) != name and folder_for(name.upper()) != name.upper()
    assert classlist.safe_folder({"folder": "../../etc", "student": "x"}).startswith("student-")
    assert classlist.safe_folder({"folder": "feedback", "student": "x"}).startswith("student-")


def test_without_an_assignment_the_columns_are_what_was_submitted(tmp_path):
    reports, _ = draw_class()
    plain = []
    for name in ("student01", "student19"):
        report = reports[name].to_json()
        report.pop("assigned", None)
        plain.append(report)
    book = gradebook.collect(plain)
    assert book.assigned is None and book.columns == ["ex01", "ex02", "ex03"]
    row = next(r for r in book.rows if r.student == "student19")
    assert row.parts["ex03"].score is None and row.missing == ["ex03"] and row.max_score == 11
    rows = list(csv.DictReader(io.StringIO(gradebook.grades_csv(book))))
    assert next(r for r in rows if r["student"] == "student19")["ex03"] == ""
    moodle = list(csv.DictReader(io.StringIO(gradebook.moodle_csv(book))))
    assert next(r for r in moodle if r["username"] == "student19")[f"ex03 {get('ex03').title}"] == "-"
    with pytest.raises(GradebookError, match="no exercise 'ex99'"):
        gradebook.collect(plain, assigned=["ex99"])


@pytest.mark.slow  # three grader CLI runs (~20 s)
def test_cli_merges_shards_into_the_gradebook(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_class(a, NAMES[:10])
    write_class(b, NAMES[10:])
    env = {**os.environ, "PYTHONPATH": str(Path(gradebook.__file__).parents[2])}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tracekit", "grades", *args], capture_output=True, text=True,
                              timeout=300, env=env)

    done = cli(str(a), str(b), "--out", str(tmp_path / "book"))
    assert done.returncode == 0, done.stderr
    assert "wrote the gradebook of 30 students" in done.stdout
    for name in ("grades.csv", "canvas.csv", "moodle.csv", "summary.html"):
        assert (tmp_path / "book" / name).stat().st_size > 500
    assert len(os.listdir(tmp_path / "book" / "feedback")) == 30
    stdout = cli(str(a), str(b))
    assert stdout.returncode == 0  # the same rows; the file starts with a BOM for Excel, standard output does not
    assert stdout.stdout == (tmp_path / "book" / "grades.csv").read_text(encoding="utf-8-sig")
    one = cli(str(a), str(b), "--out", str(tmp_path / "class.csv"), "--exercises", "ex01")
    assert one.returncode == 0 and read_csv(tmp_path / "class.csv")[0][:4] == ["student", "score", "max_score", "ex01"]
    bad = cli(str(a), "--exercises", "ex99")
    assert bad.returncode == 2 and "--exercises" in bad.stderr
    bad = cli(str(tmp_path / "nope"))
    assert bad.returncode == 2 and "no such results folder" in bad.stderr


# ---- a real browser ----------------------------------------------------------------------------------

MEASURE_JS = """() => Array.from(document.querySelectorAll('svg.chart')).map(svg => {
  const box = svg.getBoundingClientRect();
  const bars = Array.from(svg.querySelectorAll('rect')).map(r => r.getBoundingClientRect().height);
  return {width: box.width, height: box.height, bars: bars.length, tallest: Math.max(...bars)};
})"""


@pytest.mark.browser
def test_summary_renders_in_a_real_browser(klass, tmp_path):
    from jupyterlab_page import CHROMIUM, FLAGS

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the [test] extra")
    errors, requests = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("request", lambda req: requests.append(req.url))
            page.goto((klass["out"] / "summary.html").resolve().as_uri())
            page.wait_for_load_state("load")
            charts = page.evaluate(MEASURE_JS)
            title = page.title()
            shot = tmp_path / "summary.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    print(f"\nsummary.html screenshot: {shot}")
    assert errors == [] and title == "tracekit gradebook"
    assert [u for u in requests if not u.startswith("file://")] == []  # nothing from the network
    assert len(charts) == sum(len(get(e).questions) for e in ASSIGNED) + 1
    for c in charts:
        assert c["width"] > 50 and c["height"] > 50 and c["bars"] >= 2 and c["tallest"] > 10, c
    assert shot.stat().st_size > 20_000
