"""The course a student gets (tracekit/course.py, `tracekit course`, `tracekit lab`), `tk.check`'s one
report, and the CLI's one-line errors, in-process. The built wheel is tested in tests/test_wheel.py."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import tracekit as tk
from tracekit import cli
from tracekit.course import (
    FOLDERS,
    KERNELSPEC,
    MANIFEST,
    cells_digest,
    copy_course,
    course_files,
    course_source,
    lab_command,
)
from tracekit.errors import CourseError, TracekitError
from tracekit.exercises.report import CheckReport

ROOT = Path(__file__).resolve().parent.parent
LAST_WHOLE_FILE_HASHES = "ee18285"  # the last commit whose `tracekit course` recorded bare file hashes
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
    manifest["notebooks/04_retention.ipynb"] = hashlib.sha256(old.read_bytes()).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))
    done = copy_course(folder)
    assert done.updated == ["notebooks/04_retention.ipynb"] and done.kept == []
    assert old.read_bytes() == (ROOT / "notebooks" / "04_retention.ipynb").read_bytes()


def _older_course(folder: Path, name: str) -> Path:
    """`folder` as copied by an earlier course whose `name` had one more markdown cell (the course changed since)."""
    copy_course(folder)
    path = folder / name
    book = nbformat.read(path, as_version=4)
    book.cells.insert(1, nbformat.v4.new_markdown_cell("A paragraph the newer course dropped."))
    nbformat.write(book, path)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest[name] = {"file": hashlib.sha256(path.read_bytes()).hexdigest(), "cells": cells_digest(path.read_bytes())}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return path


def _reopened(book):  # JupyterLab opened it on ipykernel's kernel: the kernelspec and language_info it writes
    book.metadata.kernelspec = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    book.metadata["language_info"] = {"name": "python", "version": "3.12.1", "mimetype": "text/x-python"}


def _run_again(book):  # every code cell run once more: new execution counts and an output
    for n, cell in enumerate(c for c in book.cells if c.cell_type == "code"):
        cell.execution_count = 100 + n
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"run {n}\n")]


def _outputs_cleared(book):
    for cell in book.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


def _output_collapsed(book):  # collapsing an output and a cell's new id are cell metadata, not her work
    book.cells[-1].metadata["jupyter"] = {"outputs_hidden": True}
    book.cells[-1].metadata["collapsed"] = True
    book.cells[0].id = "a-new-id"


def _cell_edited(book):
    code = next(c for c in book.cells if c.cell_type == "code")
    code.source += "\nprint('mine')"


def _cell_added(book):
    book.cells.append(nbformat.v4.new_code_cell("y = 2 * 3"))


def _cell_removed(book):
    del book.cells[-1]


def _markdown_note(book):
    book.cells[0].source += "\n\nMy note: ask about this."


def _cells_swapped(book):
    book.cells[1], book.cells[2] = book.cells[2], book.cells[1]


NOT_HERS = {"reopened (kernelspec rewritten)": [_reopened], "cells run again": [_run_again],
            "outputs cleared": [_outputs_cleared], "output collapsed, new cell id": [_output_collapsed],
            "reopened, run and autosaved": [_reopened, _run_again]}
HERS = {"a cell edited": [_cell_edited], "a cell added": [_cell_added], "a cell removed": [_cell_removed],
        "a note in a markdown cell": [_markdown_note], "cells reordered": [_cells_swapped],
        "reopened, edited and run": [_reopened, _cell_edited, _run_again]}


@pytest.mark.parametrize("change", list(NOT_HERS) + list(HERS))
def test_only_the_students_cells_make_a_notebook_hers(change, tmp_path):
    """A notebook the student opened, ran or cleared is updated when the course changes; one whose cells
    she changed is kept, byte for byte."""
    name = "notebooks/07_hooks_offload.ipynb"
    path = _older_course(tmp_path / "c", name)
    book = nbformat.read(path, as_version=4)
    for step in {**NOT_HERS, **HERS}[change]:
        step(book)
    nbformat.write(book, path)
    before = path.read_bytes()
    done = copy_course(tmp_path / "c")
    if change in NOT_HERS:
        assert done.updated == [name] and done.kept == [], done.summary()
        assert path.read_bytes() == (ROOT / name).read_bytes()
        assert sorted(copy_course(tmp_path / "c").unchanged) == sorted(course_files())  # and up to date from then on
    else:
        assert done.kept == [name] and done.updated == [], done.summary()
        assert path.read_bytes() == before
        assert copy_course(tmp_path / "c").kept == [name]  # kept every time


@pytest.mark.parametrize("change", ["reopened and run", "a cell edited"])
def test_a_course_that_did_not_change_keeps_the_students_outputs(change, tmp_path):
    """A notebook whose cells are the course's, run by the student: 'up to date', her outputs stay."""
    name = "exercises/ex02_small_trace.ipynb"
    copy_course(tmp_path)
    path = tmp_path / name
    book = nbformat.read(path, as_version=4)
    _reopened(book)
    _run_again(book)
    if change == "a cell edited":
        _cell_edited(book)
    nbformat.write(book, path)
    before = path.read_bytes()
    done = copy_course(tmp_path)
    assert path.read_bytes() == before
    assert (name in done.unchanged) if change == "reopened and run" else (done.kept == [name])


def _git_version(commit: str, name: str) -> bytes | None:
    try:
        return subprocess.run(["git", "show", f"{commit}:{name}"], cwd=ROOT, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _older_cells(name: str) -> bytes | None:
    """The newest version of `name` an older tracekit shipped whose cells differ from today's (git)."""
    try:
        commits = subprocess.run(["git", "log", "--format=%H", LAST_WHOLE_FILE_HASHES, "--", name], cwd=ROOT,
                                 check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    today = cells_digest((ROOT / name).read_bytes())
    versions = (_git_version(commit, name) for commit in commits)
    return next((v for v in versions if v is not None and cells_digest(v) != today), None)


@pytest.mark.parametrize("change", ["reopened and run", "a cell edited", "untouched"])
def test_a_folder_an_older_tracekit_copied_whole_file_hashes(change, tmp_path):
    """An older tracekit recorded each file's sha256 only: a notebook from it that the student reopened and
    ran is still updated (its cells are looked up among the versions that tracekit shipped); an edited one kept."""
    name = "notebooks/07_hooks_offload.ipynb"
    old = _older_cells(name)
    if old is None:
        pytest.skip("needs the checkout's git history")
    copy_course(tmp_path)
    path = tmp_path / name
    path.write_bytes(old)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    manifest = {rel: entry["file"] for rel, entry in manifest.items()}  # the old manifest: bare hashes
    manifest[name] = hashlib.sha256(old).hexdigest()
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert old != (ROOT / name).read_bytes() and cells_digest(old) != cells_digest((ROOT / name).read_bytes())
    if change != "untouched":
        book = nbformat.read(path, as_version=4)
        _reopened(book)
        _run_again(book)
        if change == "a cell edited":
            _cell_edited(book)
        nbformat.write(book, path)
    done = copy_course(tmp_path)
    assert done.kept == ([name] if change == "a cell edited" else []), done.summary()
    assert done.updated == ([] if change == "a cell edited" else [name]), done.summary()
    assert len(done.unchanged) == 21  # the other files, recorded as bare hashes, are still the course's


@pytest.mark.slow
def test_the_table_of_shipped_versions_is_the_git_history():
    """tracekit/course_history.py is what tools/course_history.py computes from git now."""
    if _git_version(LAST_WHOLE_FILE_HASHES, "notebooks/01_forward_values.ipynb") is None:
        pytest.skip("needs the checkout's git history")
    sys.path.insert(0, str(ROOT / "tools"))
    from course_history import LAST, shipped_versions

    from tracekit.course_history import CELLS_OF_SHIPPED

    assert LAST == LAST_WHOLE_FILE_HASHES
    assert shipped_versions() == CELLS_OF_SHIPPED


def test_a_broken_or_foreign_file_is_kept(tmp_path):
    copy_course(tmp_path)
    broken = tmp_path / "notebooks" / "03_storage.ipynb"
    broken.write_text('{"cells": [')  # not JSON any more: never replaced
    mine = tmp_path / "notebooks" / "99_mine.ipynb"
    mine.write_text("{}")
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    manifest["notebooks/03_storage.ipynb"] = "not a hash"
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    done = copy_course(tmp_path)
    assert done.kept == ["notebooks/03_storage.ipynb"] and broken.read_text() == '{"cells": ['
    assert mine.read_text() == "{}"


def test_the_course_ships_the_kernelspec_jupyterlab_writes():
    """ipykernel's own kernelspec (what JupyterLab writes into a notebook it opens) is in every notebook."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = get_kernel_dict()
    assert {"display_name": spec["display_name"], "language": spec["language"], "name": "python3"} == KERNELSPEC
    for rel, path in course_files().items():
        assert nbformat.read(path, as_version=4).metadata.kernelspec == KERNELSPEC, rel
    for path in (ROOT / "solutions").glob("ex*.ipynb"):
        assert nbformat.read(path, as_version=4).metadata.kernelspec == KERNELSPEC, path.name


def test_a_file_in_the_way_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(CourseError, match="is a file, not a folder"):
        copy_course(tmp_path / "f")
    (tmp_path / "c" / "notebooks" / "01_forward_values.ipynb").mkdir(parents=True)
    with pytest.raises(CourseError, match="is a folder: move it away"):
        copy_course(tmp_path / "c")


@pytest.mark.parametrize("as_root", [False, True])
def test_lab_serves_the_course_root_and_opens_the_first_lesson(as_root, tmp_path):
    copy_course(tmp_path)
    command = lab_command(sys.executable, tmp_path, ["--no-browser"], as_root=as_root)
    assert command == [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={tmp_path}", "--no-browser",
                       "--LabApp.default_url=/lab/tree/notebooks/01_forward_values.ipynb", "--LabApp.news_url=None",
                       *(["--allow-root"] if as_root else [])]
    # what the student gives wins, and is not given twice
    mine = ["--allow-root", "--LabApp.news_url=https://example.org/feed", "--LabApp.default_url=/lab"]
    assert lab_command(sys.executable, tmp_path, mine, as_root=True)[4:] == mine
    assert ("--allow-root" in lab_command(sys.executable, tmp_path, [])) == (os.geteuid() == 0)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs to run as root")
def test_lab_starts_as_root(tmp_path):
    """As root (a container, a hub image), `tracekit lab` starts JupyterLab: it answers on its port."""
    from servers import free_port, stop, wait_http

    copy_course(tmp_path / "c")
    port, token = free_port(), "t" * 32
    env = {**os.environ, "HOME": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    log = (tmp_path / "lab.log").open("wb")
    lab = subprocess.Popen([sys.executable, "-m", "tracekit", "lab", str(tmp_path / "c"), "--no-browser",
                            "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}"],
                           env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/status?token={token}", process=lab, timeout=180)
    finally:
        stop(lab)
    assert "Running as root is not recommended" not in (tmp_path / "lab.log").read_text()


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


@pytest.mark.parametrize("name", ["EX03", "Ex03", " ex03 ", "ex3"])
def test_check_takes_an_exercise_id_in_any_case(name, capsys):
    report = tk.check(name, {})
    assert report.exercise == "ex03" and report.max_score == 4 and capsys.readouterr().out.startswith("ex03 · ")


@pytest.mark.parametrize("name", ["ex99", "ex00", "ex011", "ex", "03", "hooks", "", 7, None])
def test_check_of_an_unknown_exercise_names_the_exercises(name):
    with pytest.raises(TracekitError) as raised:
        tk.check(name, {})
    message = str(raised.value)
    assert isinstance(raised.value, KeyError) and message.startswith(f"no exercise {name!r}: the exercises are ")
    assert all(i in message for i in tk.exercises.IDS) and 'tk.check("ex01")' in message
