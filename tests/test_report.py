"""Grading's record (issue 40) and the edges that used to change or hide a grade (issue 36): typed
results parsed at the trust boundary, the one reader and writer of report files, the assignment a
results folder keeps, human-sorted CSVs with a BOM where Excel reads them, Moodle usernames, the
summary's grouping of mistakes, released notebooks that say their release, and one-line errors.
All fast: no sandbox runs here (tests/test_batch.py grades for real)."""

import csv
import io
import json
import random
import string
from pathlib import Path

import nbformat
import pytest

from tracekit import __version__
from tracekit.cli import TIMEOUT_HELP, main
from tracekit.errors import GradebookError
from tracekit.exercises import IDS, get
from tracekit.grading import classlist, gradebook, report
from tracekit.grading.grader import Options, _release_note, assignment_for, make_report, progress_line
from tracekit.grading.report import (
    NOT_GRADED,
    ExerciseResult,
    QuestionResult,
    StudentReport,
    load_report,
    not_submitted,
    read_assignment,
    results_key,
    write_assignment,
    write_report,
)
from tracekit.grading.submission import read

ROOT = Path(__file__).resolve().parent.parent


def raw_part(exercise: str, fractions: list[float], **extra) -> dict:
    ex = get(exercise)
    questions = [{"name": q.name, "prompt": q.prompt, "score": q.points * f, "max_score": q.points,
                  "message": "correct" if f == 1 else f"{q.name}: look again", "status": "x"}
                 for q, f in zip(ex.questions, fractions)]
    return {"notebook": f"{exercise}.ipynb", "exercise": exercise, "title": ex.title,
            "score": sum(q["score"] for q in questions), "max_score": ex.max_score, "questions": questions,
            "sandbox": {"seconds": 1.5, "notes": [], "cell_errors": [], "tampered": [], "isolation": "isolation: full"},
            **extra}


# ---- the types ------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, points, expected", [
    (2, 3, 2.0), (5, 3, 3.0), (-1, 3, 0.0), (float("nan"), 3, 0.0), (float("inf"), 3, 3.0), ("2.5", 3, 2.5),
    ("two", 3, 0.0), (None, 3, 0.0), ([1], 3, 0.0), (1.005, 3, 1.0),
    (10**400, 3, 0.0),  # too big to be a float: no score
], ids=lambda v: str(v)[:12])
def test_a_question_score_is_clamped_to_its_points(given, points, expected):
    q = QuestionResult.from_json({"name": "q1", "score": given, "max_score": 99, "message": "m"}, points)
    assert q.score == expected and q.max_score == points


def test_an_exercise_keeps_only_its_own_questions_with_their_own_points():
    ex = get("ex02")
    raw = raw_part("ex02", [1, 1, 1])
    raw["questions"].append({"name": "q9", "score": 100, "max_score": 100})  # a question ex02 has not
    raw["questions"][0]["max_score"] = 50  # points are the definition's, never the raw part's
    raw["questions"][0]["score"] = 50
    raw["score"] = 1000
    part = ExerciseResult.from_json(raw)
    assert [q.name for q in part.questions] == [q.name for q in ex.questions]
    assert part.questions[0].score == part.questions[0].max_score == ex.questions[0].points
    assert part.score == ex.max_score and part.max_score == ex.max_score


@pytest.mark.parametrize("exercise", ["ex99", None, 3, "../ex01", "EX01"])
def test_a_part_for_no_known_exercise_counts_nothing(exercise):
    raw = raw_part("ex01", [1, 1, 1])
    raw["exercise"] = exercise
    part = ExerciseResult.from_json(raw)
    assert part.exercise is None and part.score == part.max_score == 0 and part.questions == ()


@pytest.mark.parametrize("garbage", [None, [], "x", 5, {"questions": "not a list"}, {"sandbox": []},
                                     {"exercise": "ex01", "questions": [None, 3, "q1"], "score": "lots"}])
def test_garbage_parses_to_a_part_that_scores_zero(garbage):
    part = ExerciseResult.from_json(garbage)
    assert part.score == 0 and all(q.score == 0 for q in part.questions)


def test_texts_from_a_sandbox_are_cut_to_size():
    raw = raw_part("ex01", [0, 0, 0])
    raw["questions"][0]["message"] = "m" * 10**6
    raw["sandbox"]["notes"] = [f"note {i}" for i in range(10**4)]
    raw["problem"] = "p" * 10**5
    part = ExerciseResult.from_json(raw)
    assert len(part.questions[0].message) < 3000 and "more characters" in part.questions[0].message
    assert len(part.notes) == report.MAX_ITEMS + 1 and part.notes[-1].startswith("… and ")
    assert len(part.problem) < 1100


def test_a_report_round_trips_through_its_json():
    first = make_report("ann", [raw_part("ex01", [1, 0.5, 0]), raw_part("ex03", [1, 1])], ["p"], 2.0,
                        assigned=("ex01", "ex03"), shard=(1, 2))
    again = StudentReport.from_json(json.loads(json.dumps(first.to_json())))
    assert again == first and again.to_json() == first.to_json()
    assert first.score == 1 + 0.5 + get("ex03").max_score and first.max_score == 9
    assert first["score"] == first.score and first.get("nothing", 7) == 7  # read as the file holds it
    assert first.parts["ex01"].questions[1].score == 0.5


def test_a_report_total_is_the_assignment_out_of_its_points():
    # a part for an exercise outside the assignment does not count; one assigned and missing is 0
    typed = make_report("ann", [raw_part("ex01", [1, 1, 1]), raw_part("ex02", [1, 1, 1])], [], 1.0,
                        assigned=("ex01", "ex03"))
    assert (typed.score, typed.max_score) == (5, 9)
    raw = typed.to_json()
    raw["score"] = 1000
    assert StudentReport.from_json(raw).score == 9  # clamped to the assignment's points


def test_gradescope_results_are_plain_text_and_name_every_question():
    typed = make_report("ann", [raw_part("ex01", [1, 0, 1])], ["ann.ipynb: cell 2: ZeroDivisionError: x"], 1.0,
                        assigned=("ex01",))
    doc = typed.gradescope()
    assert doc["output_format"] == "text" and all(t["output_format"] == "text" for t in doc["tests"])
    assert [t["status"] for t in doc["tests"]] == ["passed", "failed", "passed"]
    assert doc["score"] == 4 and doc["max_score"] == 5 and "ZeroDivisionError" in doc["output"]


def test_not_submitted_and_not_graded_are_told_apart():
    missing = not_submitted("ex02")
    unread = not_submitted("ex02", ["bob/ex02.ipynb is not a valid notebook (JSON error: x)"])
    assert missing.status == "not submitted" and not missing.submitted
    assert unread.status == NOT_GRADED and unread.submitted and "bob/ex02.ipynb" in unread.problem
    assert missing.score == unread.score == 0 and len(unread.questions) == len(get("ex02").questions)


# ---- the files ----------------------------------------------------------------------------------

def test_a_report_verifies_only_as_written(tmp_path):
    key = results_key(tmp_path, create=True)
    typed = make_report("ann", [raw_part("ex01", [1, 1, 0])], [], 1.0, assigned=("ex01",))
    write_report(tmp_path, typed, key)
    assert load_report(tmp_path, "ann", key) == typed
    path = tmp_path / "ann" / "report.json"
    raw = json.loads(path.read_text())
    for forge in ({"score": 5}, {"assigned": ["ex02"]}, {"student": "bob"}, {"signature": "0" * 64}):
        path.write_text(json.dumps({**raw, **forge}))
        assert load_report(tmp_path, "ann", key) is None, forge
    path.write_text(json.dumps(raw))
    assert load_report(tmp_path, "ann", key) == typed and load_report(tmp_path, "ann", b"other key") is None
    assert json.loads((tmp_path / "ann" / "results.json").read_text()) == typed.gradescope()


def test_the_assignment_belongs_to_the_results_folder(tmp_path):
    key = results_key(tmp_path, create=True)
    said: list[str] = []
    assert read_assignment(tmp_path, key) is None
    assert assignment_for(tmp_path, Options(), key, {}, said.append) is None and not said
    write_assignment(tmp_path, ("ex03", "ex01"), key)
    assert read_assignment(tmp_path, key) == ("ex01", "ex03") and read_assignment(tmp_path, b"k" * 32) is None
    # a rerun without --exercises keeps it, and says so
    assert assignment_for(tmp_path, Options(), key, {}, said.append) == ("ex01", "ex03")
    assert "assignment: ex01,ex03" in said[-1]
    # the same one again: nothing to say; another one: said, and it is the new one
    said.clear()
    assert assignment_for(tmp_path, Options(exercises=("ex01", "ex03")), key, {}, said.append) == ("ex01", "ex03")
    assert not said
    assert assignment_for(tmp_path, Options(exercises=("ex02",)), key, {}, said.append) == ("ex02",)
    assert "changes from ex01,ex03 to ex02" in said[-1]
    # a forged assignment.json (not signed by the folder's key) is not one
    (tmp_path / "assignment.json").write_text(json.dumps({"exercises": ["ex10"], "signature": "0" * 64}))
    assert read_assignment(tmp_path, key) is None


def test_an_older_results_folder_keeps_the_assignment_its_reports_agree_on(tmp_path):
    key = results_key(tmp_path, create=True)
    reports = {s: make_report(s, [raw_part("ex01", [1, 1, 1])], [], 1.0, assigned=("ex01", "ex02"))
               for s in ("ann", "bob")}
    said: list[str] = []
    assert assignment_for(tmp_path, Options(), key, reports, said.append) == ("ex01", "ex02")
    reports["cid"] = make_report("cid", [], [], 1.0, assigned=("ex01",))
    assert assignment_for(tmp_path, Options(), key, reports, said.append) is None  # they disagree: none


def write_class(out: Path, names: list[str]) -> None:
    key = results_key(out, create=True)
    for i, name in enumerate(names):
        write_report(out, make_report(name, [raw_part("ex01", [1, i % 2, 0])], [], 1.0, assigned=("ex01",)), key)


NAMES = ["Zoë", "alice", "José María", "bob", "Émile", "émile", "zack", "Åsa", "ana", "Bob"]


def test_csv_rows_are_sorted_as_people_sort_names(tmp_path):
    write_class(tmp_path, NAMES)
    gradebook.write_from([tmp_path], tmp_path)
    rows = list(csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8-sig")))
    got = [r["student"] for r in rows]
    assert got == ["alice", "ana", "Åsa", "Bob", "bob", "Émile", "émile", "José María", "zack", "Zoë"]
    assert got.index("alice") < got.index("José María")
    shuffled = NAMES[:]
    random.Random(5).shuffle(shuffled)
    assert sorted(shuffled, key=classlist.collation) == got  # the order does not depend on the input's


def test_grades_csv_has_a_bom_for_excel_and_the_lms_files_do_not(tmp_path):
    write_class(tmp_path, ["José María", "ann"])
    gradebook.write_from([tmp_path], tmp_path)
    assert (tmp_path / "grades.csv").read_bytes().startswith(b"\xef\xbb\xbfstudent,")
    assert "José María" in (tmp_path / "grades.csv").read_bytes().decode("utf-8")
    for name in ("canvas.csv", "moodle.csv"):
        assert not (tmp_path / name).read_bytes().startswith(b"\xef\xbb\xbf"), name


@pytest.mark.parametrize("names, odd", [
    (["ann", "bob.smith", "c_d-e@uni.edu", "s1234"], []),
    (["ann", "José María"], ["José María"]),
    (["Ann", "bob"], ["Ann"]),  # Moodle usernames are lower case
    (["ann lee", "bob\tx", "ann"], ["ann lee", "bob\\x09x"]),
])
def test_moodle_csv_warns_of_names_that_cannot_be_usernames(tmp_path, names, odd):
    write_class(tmp_path, names)
    book = gradebook.write_from([tmp_path], tmp_path)
    warning = gradebook.moodle_warning(book)
    if not odd:
        assert warning is None and not book.notes
        return
    assert warning.startswith(f"moodle.csv: {len(odd)} of {len(names)} names are not Moodle usernames")
    assert all(repr(n) in warning for n in odd) and warning in book.notes
    assert "moodle.csv" in (tmp_path / "summary.html").read_text(encoding="utf-8")


# ---- the summary's mistakes ---------------------------------------------------------------------

EX03 = "for n={n}, k={k}, {dtype} you counted the slice's own elements: a view keeps its whole allocation"


def test_the_same_mistake_on_other_inputs_is_one_kind():
    rng = random.Random(3)
    kinds = {classlist.what_was_wrong(EX03.format(n=rng.randrange(2, 10**6), k=rng.randrange(1, 99),
                                                  dtype=rng.choice(["float32", "float64", "bfloat16", "int8"])))
             for _ in range(50)}
    assert len(kinds) == 1
    table = {classlist.what_was_wrong(f"{', '.join(map(repr, rng.sample(['mul', 'exp', 'sin', 'div'], 2)))}: "
                                      "look at what backward reads; 'tanh': no entry (fill in every case)")
             for _ in range(20)}
    assert table == {("look at what backward reads", "no entry (fill in every case)")}
    assert classlist.what_was_wrong("depth 4: 3 of 4 blocks redone") != classlist.what_was_wrong("checkpoint more")


def test_the_summary_counts_students_per_mistake(tmp_path):
    key = results_key(tmp_path, create=True)
    rng = random.Random(1)
    for i in range(6):
        part = raw_part("ex03", [0, 1])
        part["questions"][0]["message"] = EX03.format(n=rng.randrange(10, 999), k=rng.randrange(1, 9),
                                                      dtype="float32")
        write_report(tmp_path, make_report(f"s{i}", [part], [], 1.0, assigned=("ex03",)), key)
    gradebook.write_from([tmp_path], tmp_path)
    page = (tmp_path / "summary.html").read_text(encoding="utf-8")
    assert "<td>for n=…, k=… you counted the slice&#x27;s own elements: a view keeps its whole allocation</td>" \
           '<td class="n">6</td>' in page


def test_a_long_message_is_never_cut_inside_a_word():
    rng = random.Random(7)
    for _ in range(200):
        words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randrange(1, 15)))
                 for _ in range(rng.randrange(1, 80))]
        text = " ".join(words)
        most = rng.randrange(10, 300)
        short = classlist.shorten(text, most)
        if len(text) <= most:
            assert short == text
            continue
        kept = short.removesuffix(" …").split(" ")
        assert short.endswith(" …") and len(short) <= most + 2
        if len(words[0]) > most:  # a first word longer than the room: the only one ever cut
            assert kept == [words[0][:most]]
        else:
            assert kept == words[:len(kept)], (text, most, short)


# ---- releases -------------------------------------------------------------------------------------

def test_released_notebooks_carry_their_release(tmp_path, capsys):
    assert main(["release", str(tmp_path / "rel")]) == 0
    released = sorted((tmp_path / "rel").glob("ex*.ipynb"))
    assert len(released) == len(IDS)
    for path in released:
        book = nbformat.read(path, as_version=4)
        assert book.metadata["tracekit"]["release"] == __version__
        assert read(path, "ann").release == __version__ and read(path, "ann").exercise in IDS


@pytest.mark.parametrize("release, said", [(__version__, False), ("", False), ("0.0.1", True), ("9.9", True)])
def test_a_notebook_from_another_release_says_so(release, said):
    notes = _release_note(release)
    assert bool(notes) == said
    if said:
        assert f"released with tracekit {release}" in notes[0] and f"graded by tracekit {__version__}" in notes[0]


def test_a_release_note_reaches_the_problems_and_the_feedback(tmp_path):
    part = raw_part("ex01", [1, 0, 0], release="0.0.1")
    part["sandbox"]["notes"] = _release_note("0.0.1")
    typed = make_report("ann", [part], [], 1.0, assigned=("ex01",))
    assert any("released with tracekit 0.0.1" in p for p in typed.problems)
    write_report(tmp_path, typed, results_key(tmp_path, create=True))
    gradebook.write_from([tmp_path], tmp_path)
    assert "released with tracekit 0.0.1" in (tmp_path / "feedback" / "ann.md").read_text(encoding="utf-8")
    assert "released with tracekit 0.0.1" in (tmp_path / "grades.csv").read_text(encoding="utf-8-sig")


# ---- what the progress line and the CLI say ------------------------------------------------------

def test_an_unreadable_notebook_is_a_problem_not_a_score():
    unread = ExerciseResult("broken.ipynb", None, 0.0, 0, problem="broken.ipynb is not a valid notebook",
                            status=NOT_GRADED)
    alone = make_report("broken", [unread], [], 0.1)
    assert progress_line(alone) == "broken.ipynb: broken.ipynb is not a valid notebook"
    assert "0/0" not in progress_line(alone)
    beside = make_report("ann", [unread, not_submitted("ex01", ["broken.ipynb is not a valid notebook"])], [], 0.1,
                         assigned=("ex01",))
    assert progress_line(beside).startswith("0/5") and "broken.ipynb" in progress_line(beside)


def one_error_line(capsys, argv: list[str], said: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "Traceback" not in err[0], err


def test_paths_of_the_wrong_kind_are_one_line_errors(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a notebook")
    empty = tmp_path / "empty"
    empty.mkdir()
    one_error_line(capsys, ["grade", str(notes)], "notes.txt is a file, not a notebook (.ipynb) or a folder")
    one_error_line(capsys, ["grade", str(empty), "--out", str(notes)], f"--out {notes} is a file")
    one_error_line(capsys, ["grades", str(notes)], "notes.txt is a file, not a results folder")
    one_error_line(capsys, ["grades", str(empty)], "no results in")
    one_error_line(capsys, ["grades", str(tmp_path / "nope")], "no such results folder")
    one_error_line(capsys, ["check", str(empty)], "is a folder, not a notebook")
    write_class(tmp_path / "res", ["ann"])
    one_error_line(capsys, ["grades", str(tmp_path / "res"), "--out", str(notes)], f"{notes} is a file")
    one_error_line(capsys, ["grades", str(tmp_path / "res"), "--out", str(notes / "book")], "Not a directory")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ann.ipynb").write_bytes((ROOT / "exercises" / "ex01_forward_values.ipynb").read_bytes())
    one_error_line(capsys, ["grade", str(subs), "--out", str(notes / "results")], f"{notes} is a file, so no folder")
    assert notes.read_text() == "not a notebook"  # left as it was, not moved aside
    assert main(["grades", str(tmp_path / "res"), "--out", str(tmp_path / "g.csv")]) == 0
    assert (tmp_path / "g.csv").read_bytes().startswith(b"\xef\xbb\xbfstudent,")
    with pytest.raises(GradebookError, match="no results in"):
        gradebook.write_from([empty], tmp_path / "out")


def test_timeout_means_one_thing_in_every_command(capsys):
    helps = {}
    for command in ("grade", "check", "autograder"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        helps[command] = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too
    words = "".join(TIMEOUT_HELP.split())
    for command, text in helps.items():
        assert words in text, command
    assert "CPU-seconds" in words and "wall-clock" in words


def test_reading_a_released_notebook_as_a_submission_keeps_the_exercise(tmp_path):
    book = nbformat.read(ROOT / "exercises" / "ex02_small_trace.ipynb", as_version=4)
    book.metadata["tracekit"]["release"] = "0.0.1"
    nbformat.write(book, tmp_path / "old.ipynb")
    sub = read(tmp_path / "old.ipynb", "ann")
    assert sub.exercise == "ex02" and sub.release == "0.0.1"
    buf = io.StringIO()
    json.dump({"cells": [], "metadata": {"tracekit": {"exercise": "ex02", "release": ["not", "text"]}}}, buf)
    (tmp_path / "odd.ipynb").write_text(buf.getvalue())
    assert read(tmp_path / "odd.ipynb", "ann").release == ""


def test_an_unreadable_notebook_in_a_class_is_told_the_same_everywhere(tmp_path):
    """Its student's feedback, moodle.csv and grades.csv all say it could not be read, none that no
    notebook was found (what the problem line lists would then be contradicted)."""
    key = results_key(tmp_path, create=True)
    why = "bob/ex01.ipynb is not a valid notebook (JSON error: Expecting value)"
    unread = ExerciseResult("bob/ex01.ipynb", None, 0.0, 0, problem=why, status=NOT_GRADED)
    write_report(tmp_path, make_report("bob", [unread, not_submitted("ex01", [why]), not_submitted("ex02")], [], 0.1,
                                       assigned=("ex01", "ex02")), key)
    gradebook.write_from([tmp_path], tmp_path)
    feedback = (tmp_path / "feedback" / "bob.md").read_text(encoding="utf-8")
    ex01 = feedback[feedback.index("## ex01"):feedback.index("## ex02")].replace("`", "")  # names set in code
    assert "could not be read" in ex01 and why in ex01 and "was found" not in ex01
    assert "No notebook for this exercise was found" in feedback[feedback.index("## ex02"):]  # truly missing
    (row,) = csv.DictReader(io.StringIO((tmp_path / "moodle.csv").read_text(encoding="utf-8")))
    told = row[f"Feedback: ex01 {get('ex01').title}"]
    assert "could not be read" in told and "not submitted" not in told and row[f"ex01 {get('ex01').title}"] == "0"
    (line,) = csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text(encoding="utf-8-sig")))
    assert why in line["problems"] and line["max_score"] == str(get("ex01").max_score + get("ex02").max_score)


def test_the_course_notebooks_carry_this_release(tmp_path):
    """The notebooks `tracekit course` copies say the release they were made for (bump
    metadata.tracekit.release in exercises/*.ipynb with tracekit's version)."""
    from tracekit.course import copy_course

    copy_course(tmp_path / "course")
    copied = sorted((tmp_path / "course" / "exercises").glob("ex*.ipynb"))
    assert len(copied) == len(IDS)
    for path in copied:
        assert read(path, "ann").release == __version__, path.name


def test_a_rerun_with_another_secret_regrades():
    """Each student's inputs are drawn from the secret: a report graded under one secret does not
    hold under another (nor under the results key, the default), and says so without the secret."""
    from tracekit.grading.grader import Submitted, _why_regrade, secret_id

    first, second = b"s" * 16, b"t" * 16
    now = Submitted((("ann/ex01.ipynb", "0" * 64),))
    done = make_report("ann", [raw_part("ex01", [1, 1, 1])], [], 0.1, submission=now, secret=first)
    assert done.secret_id == secret_id(first) and first.hex() not in json.dumps(done.to_json())
    assert StudentReport.from_json(json.loads(json.dumps(done.to_json()))).secret_id == done.secret_id
    options = Options()
    assert _why_regrade(done, "ann", now, options, True, secret_id(first)) is None
    assert "secret" in _why_regrade(done, "ann", now, options, True, secret_id(second))
    assert secret_id(first) != secret_id(second) and len(secret_id(first)) == 16


def test_the_run_counts_the_students_whose_notebook_could_not_be_read():
    """`tracekit grade`'s last line: how many were graded, and how many of them had a notebook that
    could not be read (their grades.csv row is 0 of what was assigned, the problem says why)."""
    from tracekit.cli import _graded_line

    unread = ExerciseResult("broken.ipynb", None, 0.0, 0, problem="broken.ipynb is not a valid notebook",
                            status=NOT_GRADED)
    alone = make_report("broken", [unread], [], 0.1)
    fine = make_report("ann", [raw_part("ex01", [1, 0, 1])], [], 0.1)
    assert _graded_line([alone]) == ("graded 1 student (1 with a notebook that could not be read: grades.csv's "
                                     "problems say which)")
    assert _graded_line([alone, fine, alone]).startswith("graded 3 students (2 with")
    assert _graded_line([fine]) == "graded 1 student" and _graded_line([]) == "graded 0 students"
