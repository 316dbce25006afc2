"""The course a student gets (tracekit/course.py, `tracekit course`, `tracekit lab`), `tk.check`'s one
report, and the CLI's one-line errors, in-process. The built wheel is tested in tests/test_wheel.py."""

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

import tracekit as tk
from tracekit import cli
from tracekit.course import FOLDERS, MANIFEST, copy_course, course_files, course_source, lab_command
from tracekit.errors import CourseError
from tracekit.exercises.report import CheckReport

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\((\.\./(?:notebooks|exercises)/[^)#\s]+)")


def test_the_course_is_the_checkouts_lessons_and_exercises():
    files = course_files()
    assert course_source() == ROOT  # from a checkout; the wheel's tracekit/_course is tested from the wheel
    assert sorted(files) == sorted(f"{name}/{p.name}" for name, pattern in FOLDERS.items()
                                   for p in (ROOT / name).glob(pattern))
    assert len([f for f in files if f.startswith("notebooks/")]) == 12
    assert len([f for f in files if f.startswith("exercises/")]) == len(tk.exercises.IDS) == 10


def _links(folder: Path) -> list[tuple[Path, Path]]:
    found = []
    for path in sorted(folder.glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                found += [(path, (path.parent / link).resolve()) for link in LINK.findall(cell.source)]
    return found


@pytest.mark.parametrize("layout", ["repository", "course folder"])
def test_links_between_lessons_and_exercises_resolve(layout, tmp_path):
    folder = ROOT if layout == "repository" else copy_course(tmp_path / "c").folder
    links = _links(folder)
    lessons_to_exercises = {(a.name, b.name) for a, b in links if a.parent.name == "notebooks"}
    # every lesson's "Check yourself" links to its exercise, every exercise back to its lesson
    assert len(lessons_to_exercises) == 12, sorted(lessons_to_exercises)
    assert ("01_forward_values.ipynb", "ex01_forward_values.ipynb") in lessons_to_exercises
    assert {a.name for a, _ in links if a.parent.name == "exercises"} == {
        p.name for p in (ROOT / "exercises").glob("ex*.ipynb")}
    missing = [(str(a.relative_to(folder)), str(b)) for a, b in links if not b.is_file()]
    assert missing == []


def test_copy_adds_then_keeps_what_the_student_changed(tmp_path):
    folder = tmp_path / "course"
    first = copy_course(folder)
    assert len(first.added) == 22 and not first.kept and not first.updated
    again = copy_course(folder)
    assert again.added == [] and len(again.unchanged) == 22 and "already up to date: 22 files" in again.summary()
    mine = folder / "exercises" / "ex03_storage.ipynb"
    book = nbformat.read(mine, as_version=4)
    book.cells[1].source += "\n# the student's edit"
    nbformat.write(book, mine)
    edited = mine.read_text()
    (folder / "notebooks" / "02_small_trace.ipynb").unlink()
    third = copy_course(folder)
    assert third.kept == ["exercises/ex03_storage.ipynb"] and third.added == ["notebooks/02_small_trace.ipynb"]
    assert mine.read_text() == edited  # never overwritten
    assert "kept your version of (1): exercises/ex03_storage.ipynb" in third.summary()
    assert "added (1): notebooks/02_small_trace.ipynb" in third.summary()


def test_a_file_copied_earlier_and_unedited_is_updated(tmp_path):
    """A newer course replaces a notebook an earlier copy put there if the student never changed it."""
    folder = tmp_path / "course"
    copy_course(folder)
    old = folder / "notebooks" / "04_retention.ipynb"
    old.write_text('{"an": "earlier course version"}\n')  # as an older tracekit had copied it:
    manifest = json.loads((folder / MANIFEST).read_text())
    import hashlib

    manifest["notebooks/04_retention.ipynb"] = hashlib.sha256(old.read_bytes()).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))
    done = copy_course(folder)
    assert done.updated == ["notebooks/04_retention.ipynb"] and done.kept == []
    assert old.read_bytes() == (ROOT / "notebooks" / "04_retention.ipynb").read_bytes()


def test_a_file_in_the_way_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(CourseError, match="is a file, not a folder"):
        copy_course(tmp_path / "f")
    (tmp_path / "c" / "notebooks" / "01_forward_values.ipynb").mkdir(parents=True)
    with pytest.raises(CourseError, match="is a folder: move it away"):
        copy_course(tmp_path / "c")


def test_lab_serves_the_course_root_and_opens_the_first_lesson(tmp_path):
    copy_course(tmp_path)
    command = lab_command(sys.executable, tmp_path, ["--no-browser"])
    assert command == [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={tmp_path}", "--no-browser",
                       "--LabApp.default_url=/lab/tree/notebooks/01_forward_values.ipynb"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_course_and_lab_commands(tmp_path, capsys):
    code, out, err = run(capsys, "course", str(tmp_path / "c"))
    assert code == 0 and err == "" and "added (22)" in out and f"tracekit lab {tmp_path / 'c'}" in out
    code, out, err = run(capsys, "lab", str(tmp_path / "c"), "--print-command")
    assert code == 0 and f"--ServerApp.root_dir={tmp_path / 'c'}" in out
    assert "--LabApp.default_url=/lab/tree/notebooks/01_forward_values.ipynb" in out
    # an empty folder gets the course first
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, "lab", str(tmp_path / "empty"), "--print-command")
    assert code == 0 and "has no course yet" in err
    # without a folder, from a checkout: the checkout's root, where notebooks/ and exercises/ both are
    code, out, err = run(capsys, "lab", "--print-command")
    assert code == 0 and f"--ServerApp.root_dir={ROOT}" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"tracekit {tk.__version__}\n"


# each command with a bad path or a missing folder -> the words its one line must hold
BAD_INPUTS = {
    "course {tmp}/a-file": ["tracekit course:", "is a file, not a folder"],
    "lab {tmp}/a-file": ["tracekit lab:", "is a file"],
    "lab {tmp}/not-a-course": ["tracekit lab:", "holds no course", "tracekit course"],
    "check {tmp}/missing.ipynb": ["tracekit check:", "no such notebook"],
    "release {tmp}/a-file": ["tracekit release:", "is a file"],
    "demo --out {tmp}": ["tracekit demo:", "is a folder"],
    "demo --out {tmp}/a-file/d.svg": ["tracekit demo:"],
    "autograder --out {tmp}/a-file/b.zip --exercises ex01": ["tracekit autograder:"],
}


def bad_input_folder(tmp: Path) -> Path:
    """A file and a non-empty folder that is no course, for BAD_INPUTS."""
    (tmp / "a-file").write_text("x")
    (tmp / "not-a-course").mkdir()
    (tmp / "not-a-course" / "notes.txt").write_text("mine")
    return tmp


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_every_bad_path_is_one_clear_line(case, tmp_path, capsys):
    argv = case.format(tmp=bad_input_folder(tmp_path)).split()
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in BAD_INPUTS[case]:
        assert word in err, err


def test_demo_makes_a_missing_output_folder(tmp_path, capsys):
    code, out, err = run(capsys, "demo", "--out", str(tmp_path / "new" / "deeper" / "n.svg"))
    assert code == 0 and "<svg" in (tmp_path / "new" / "deeper" / "n.svg").read_text()


def test_check_returns_one_report_not_a_raw_list(capsys):
    report = tk.check("ex03", {})
    printed = capsys.readouterr().out  # outside a notebook it is printed, once
    assert isinstance(report, CheckReport) and isinstance(report, list)
    assert report.exercise == "ex03" and report.score == 0 and report.max_score == 4
    assert [q["name"] for q in report] == [q.name for q in tk.exercises.get("ex03").questions]
    assert {q["status"] for q in report} == {"missing"}
    assert printed == report.text() + "\n" and printed.startswith("ex03 · ") and "0 / 4 points" in printed
    assert repr(report) == report.text() and not repr(report).startswith("[")
    html = report._repr_html_()
    assert "<b>ex03 · " in html and "0 / 4 points" in html and "{&#x27;" not in html and "{'" not in html
