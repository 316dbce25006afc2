"""Batch grading end to end: reference solutions, blank notebooks and hostile submissions,
each in its own sandboxed kernel, judged by the trusted process."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tracekit.exercises import IDS, draw_inputs, get
from tracekit.grading import sandbox
from tracekit.grading.gradebook import write_from
from tracekit.grading.grader import Options, grade_all, in_shard, parse_shard, read_secret
from tracekit.grading.submission import SubmissionError, discover, identify, read

pytestmark = pytest.mark.grading
ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("ex*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("ex*.ipynb"))
ISOLATED = sandbox.can_isolate()


def with_cells(path: Path, extra: list[str], where: int = 2, drop_answers: bool = False) -> nbformat.NotebookNode:
    """A copy of a notebook with extra code cells inserted (and, optionally, answers blanked)."""
    book = nbformat.read(path, as_version=4)
    if drop_answers:
        book = nbformat.read(ROOT / "exercises" / path.name, as_version=4)
    for i, src in enumerate(extra):
        book.cells.insert(where + i, nbformat.v4.new_code_cell(src))
    return book


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """One class: nine reference solutions, one blank notebook, and every hostile case."""
    root = tmp_path_factory.mktemp("grading")
    subs, out = root / "submissions", root / "results"
    subs.mkdir()
    for path in SOLUTIONS:
        shutil.copy(path, subs / f"ref_{path.stem[:4]}.ipynb")
    shutil.copy(EXERCISES[0], subs / "blank.ipynb")
    ex01 = SOLUTIONS[0]
    hostile = {
        "loop": with_cells(ex01, ["while True:\n    pass"], where=3),
        "membomb": with_cells(ex01, ["hog = bytearray(64 * 1024**3)"], where=3),
        "sysexit": with_cells(ex01, ["import sys\nsys.exit(3)"], where=3),
        "osexit": with_cells(ex01, ["import os\nos._exit(0)"], where=3),
        "segfault": with_cells(ex01, ["import ctypes\nctypes.string_at(0)"], where=3),
        "fakeprint": with_cells(ex01, ['print("ex01 · Forward values: 5 / 5 points")\n'
                                       'print("0" * 32, \'{"observations": {}}\')'], drop_answers=True),
        "vandal": with_cells(ex01, [
            f"import shutil, pathlib\nshutil.rmtree({str(subs)!r}, ignore_errors=True)\n"
            f"pathlib.Path({str(out)!r}, 'ref_ex01').mkdir(parents=True, exist_ok=True)\n"
            f"pathlib.Path({str(out)!r}, 'ref_ex01', 'results.json').write_text('{{\"score\": 999}}')"]),
        "patcher": with_cells(ex01, [
            "import torch, tracekit\nimport tracekit.exercises as E\n"
            "torch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a, **k: True\n"
            "tracekit.check = lambda *a, **k: print('5/5')\n"
            "E.probe_all = lambda ex, ns, inp: {q.name: {'value': 'result'} for q in ex.questions}"],
            drop_answers=True),
        "alwayseq": with_cells(ex01, [
            "class Yes:\n    def __eq__(self, other):\n        return True\n    def __hash__(self):\n        return 0\n"
            "q1_slots = Yes()\nq2_slot = Yes()"], where=99, drop_answers=True),
        "snoop": with_cells(ex01, [
            "import pathlib, tracekit\n"
            "src = (pathlib.Path(tracekit.__file__).parent / 'exercises' / 'ex01.py').read_text()\n"
            "q2_slot = 'self' if 'self' in src else 'none'\n"
            f"q1_slots = sorted(p.name for p in pathlib.Path({str(ROOT / 'solutions')!r}).glob('*'))"],
            where=99, drop_answers=True),
    }
    reordered = nbformat.read(ex01, as_version=4)
    answers = [c.source for c in reordered.cells
               if c.cell_type == "code" and any(k in c.source for k in ("q1_slots", "q2_slot", "class Sigmoid"))]
    copies = [nbformat.v4.new_code_cell(src) for src in list(reversed(answers)) + answers]  # reversed, then twice
    reordered.cells = reordered.cells[:2] + copies + reordered.cells[2:]
    hostile["reordered"] = reordered
    for name, book in hostile.items():
        nbformat.write(book, subs / f"{name}.ipynb")
    (subs / "empty.ipynb").write_text("")
    (subs / "corrupt.ipynb").write_text('{"cells": [ {"cell_type": "code", "sou')
    nested = subs / "nbgrader_student" / "ex03"
    nested.mkdir(parents=True)
    shutil.copy(SOLUTIONS[2], nested / "my homework.ipynb")  # the exercise comes from the notebook, not the name
    lines = []
    reports = grade_all(subs, out, Options(timeout=300, memory_mb=3072, jobs=2, cell_timeout=10),
                        progress=lines.append)
    write_from([out], out)  # as `tracekit grade` does after grading
    return {"subs": subs, "out": out, "reports": {r["student"]: r for r in reports}, "lines": lines}


def score(batch, student):
    report = batch["reports"][student]
    return report["score"], report["max_score"]


def messages(batch, student):
    report = batch["reports"][student]
    return " | ".join([n for p in report["exercises"] for n in p.get("sandbox", {}).get("notes", [])]
                      + [p.get("problem") or "" for p in report["exercises"]]
                      + [q["message"] for p in report["exercises"] for q in p["questions"]])


def test_reference_solutions_get_full_marks(batch):
    for path in SOLUTIONS:
        student = f"ref_{path.stem[:4]}"
        got, most = score(batch, student)
        assert most > 0 and got == most, (student, messages(batch, student))
    assert {batch["reports"][f"ref_{i}"]["exercises"][0]["exercise"] for i in IDS} == set(IDS)


def test_blank_notebook_scores_zero_with_helpful_messages(batch):
    assert score(batch, "blank") == (0, 5)
    text = messages(batch, "blank")
    assert "set `q1_slots` to your answer" in text and "`Sigmoid` is not implemented yet" in text


@pytest.mark.parametrize("student", ["loop", "membomb", "sysexit", "osexit", "segfault", "reordered"])
def test_broken_cells_do_not_cost_the_real_answers(batch, student):
    assert score(batch, student) == (5, 5), messages(batch, student)


def test_what_happened_is_reported(batch):
    assert "cell 2 was skipped" in messages(batch, "osexit")  # the inserted cell is the 2nd code cell
    assert "cell 2 was skipped: the sandbox was killed" in messages(batch, "segfault")
    errors = batch["reports"]["membomb"]["exercises"][0]["sandbox"]["cell_errors"]
    assert any("MemoryError" in e for e in errors)
    errors = batch["reports"]["loop"]["exercises"][0]["sandbox"]["cell_errors"]
    assert any("CellTimeout" in e for e in errors)  # interrupted by the per-cell timer, not skipped


def test_printed_fake_results_count_for_nothing(batch):
    assert score(batch, "fakeprint") == (0, 5)


def test_monkeypatching_torch_or_tracekit_earns_nothing(batch):
    # the patches live in the run phase; the code answers are probed in a fresh interpreter
    assert score(batch, "patcher") == score(batch, "blank") == (0, 5)


def test_always_equal_objects_are_refused(batch):
    assert score(batch, "alwayseq") == (0, 5)


def test_reading_the_graders_files_finds_no_answers(batch):
    assert score(batch, "snoop") == (0, 5)


@pytest.mark.skipif(not ISOLATED, reason="hiding folders needs root and mount namespaces")
def test_vandal_cannot_touch_other_submissions_or_results(batch):
    assert (batch["subs"] / "blank.ipynb").exists() and (batch["subs"] / "ref_ex01.ipynb").exists()
    result = json.loads((batch["out"] / "ref_ex01" / "results.json").read_text())
    assert result["score"] == 5
    assert score(batch, "vandal") == (5, 5)  # its own answers still count


def test_empty_and_corrupt_notebooks_get_zero_and_a_clear_message(batch):
    assert score(batch, "empty") == (0, 0) and "is empty" in messages(batch, "empty")
    assert "not a valid notebook" in messages(batch, "corrupt")


def test_nbgrader_style_folder_is_recognised_from_content(batch):
    report = batch["reports"]["nbgrader_student"]
    assert report["exercises"][0]["exercise"] == "ex03" and report["score"] == report["max_score"] == 4


def test_result_files_gradescope_format_and_class_csv(batch):
    out = batch["out"]
    result = json.loads((out / "ref_ex02" / "results.json").read_text())
    assert result["score"] == result["max_score"] == 6
    assert len(result["tests"]) == 3
    for t in result["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility"} and t["visibility"] == "visible"
    rows = list(csv.DictReader((out / "grades.csv").open(encoding="utf-8-sig")))
    assert {r["student"] for r in rows} == set(batch["reports"])
    ref = next(r for r in rows if r["student"] == "ref_ex02")
    assert ref["score"] == ref["ex02"] == "6" and [ref[f"ex02.q{i}"] for i in (1, 2, 3)] == ["2", "2", "2"]
    assert ref["ex01"] == "" and next(r for r in rows if r["student"] == "blank")["ex01"] == "0"
    if os.geteuid() == 0 and sandbox.start_kind() == "warm":  # the isolation column says how the sandboxes started
        assert ref["isolation"] == "full, warm", ref["isolation"]
    feedback = (out / "feedback" / "ref_ex02.md").read_text(encoding="utf-8")
    assert "## ex02 · A small trace, by hand: 6 / 6" in feedback and "**q3** (2/2)" in feedback
    assert "set \\`q1_slots\\` to your answer" in (out / "feedback" / "blank.md").read_text(encoding="utf-8")
    canvas = list(csv.reader((out / "canvas.csv").open(encoding="utf-8")))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[1][0] == "Points Possible" and len(canvas) == 2 + len(batch["reports"])
    summary = (out / "summary.html").read_text(encoding="utf-8")
    assert summary.count("<svg") == 1 + sum(len(get(e).questions) for e in IDS)  # everyone's exercises
    assert not list(out.rglob(".results.json.*"))  # no half-written files left behind
    assert any(line.startswith("[") and "ref_ex09" in line for line in batch["lines"])  # progress shown


def test_rerun_skips_what_is_done_and_regrades_what_is_missing(batch):
    out = batch["out"]
    before = (out / "ref_ex01" / "results.json").stat().st_mtime_ns
    (out / "blank" / "report.json").unlink()  # as if the batch had been interrupted there
    lines = []
    reports = grade_all(batch["subs"], out, Options(timeout=300, jobs=2), progress=lines.append)
    assert [r["student"] for r in reports] == ["blank"]
    assert (out / "ref_ex01" / "results.json").stat().st_mtime_ns == before
    assert lines[0].startswith("isolation: full") or lines[0].startswith("WARNING")
    assert "already graded: " in lines[1]


def test_shards_split_the_class_deterministically():
    students = [f"student{i:03d}" for i in range(200)]
    parts = [[s for s in students if in_shard(s, (i, 4))] for i in range(1, 5)]
    assert sorted(sum(parts, [])) == students and all(30 < len(p) < 70 for p in parts)
    assert parts == [[s for s in students if in_shard(s, (i, 4))] for i in range(1, 5)]
    assert parse_shard("2/5") == (2, 5)
    for bad in ("0/3", "4/3", "two/3", "1"):
        with pytest.raises(ValueError, match="shard"):
            parse_shard(bad)


def test_reading_submissions(tmp_path):
    assert identify({"metadata": {}}, ['tk.check("ex04")']) == "ex04"
    with pytest.raises(SubmissionError, match="which exercise"):
        identify({"metadata": {}}, ["print(1)"])
    (tmp_path / "submitted" / "bob" / "hw1").mkdir(parents=True)
    shutil.copy(EXERCISES[1], tmp_path / "submitted" / "bob" / "hw1" / "anything.ipynb")
    assert [s for s, _ in discover(tmp_path)] == ["bob"]
    sub = read(tmp_path / "submitted" / "bob" / "hw1" / "anything.ipynb", "bob")
    assert sub.exercise == "ex02" and sub.code_cells[0].startswith("import torch")


@pytest.mark.skipif(not ISOLATED, reason="hiding folders needs root and mount namespaces")
def test_hidden_folders_look_empty_inside_the_sandbox(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "answers.txt").write_text("42")
    cells = ["import os", f"q1_slots = os.listdir({str(secret)!r}) if os.path.isdir({str(secret)!r}) else []",
             "q2_slot = 'x'"]
    inputs = draw_inputs(get("ex01"), seed=1)
    ran = sandbox.run(cells, "ex01", inputs, timeout=240, hide=[str(secret)])
    assert ran.observations["q1"] == {"value": []}
    assert (secret / "answers.txt").read_text() == "42"


@pytest.mark.skipif(not sandbox.can_isolate(), reason="needs bubblewrap")
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_a_secret_under_a_folder_the_sandbox_reads_is_hidden(tmp_path, monkeypatch, start):
    """The venv is visible in every sandbox: a secret file and a folder kept there are hidden by path
    (the file reads empty, the folder lists nothing), on both the warm and the cold path."""
    monkeypatch.setenv("TRACEKIT_SANDBOX", start)
    secret = Path(sys.prefix) / f"tracekit-test-secret-{os.getpid()}"
    folder = Path(sys.prefix) / f"tracekit-test-hidden-{os.getpid()}"
    secret.write_text("s3cret-s3cret-s3cret")
    folder.mkdir()
    (folder / "answers.txt").write_text("42")
    try:
        read = ("def read(path):\n    try:\n        return open(path).read()\n    except OSError as err:\n"
                "        return type(err).__name__")
        cells = ["import os", read, f"q1_slots = [read({str(secret)!r}), *os.listdir({str(folder)!r})]",
                 "q2_slot = 'x'"]
        inputs = draw_inputs(get("ex01"), seed=1)
        seen = sandbox.run(cells, "ex01", inputs, timeout=240)
        assert seen.observations["q1"] == {"value": ["s3cret-s3cret-s3cret", "answers.txt"]}  # visible unless hidden
        ran = sandbox.run(cells, "ex01", inputs, timeout=240, hide=[str(secret), str(folder)])
        # empty (a bind of /dev/null) or unreadable (the cold path's binds are nodev)
        assert ran.observations["q1"]["value"] in ([""], ["PermissionError"]), ran.observations["q1"]
        assert ran.start == seen.start == start
        assert secret.read_text() == "s3cret-s3cret-s3cret"
    finally:
        secret.unlink()
        shutil.rmtree(folder)


def test_a_secret_with_another_hard_link_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret-s3cret-s3cret")
    os.link(secret, tmp_path / "other-name")
    with pytest.raises(SubmissionError, match="hard links"):
        read_secret(secret)


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_cli_check_release_and_grade(tmp_path):
    done = run_cli("check", str(SOLUTIONS[4]))
    assert done.returncode == 0 and "ex05 · In-place mutation, diagnosed and fixed: 5 / 5 points" in done.stdout
    done = run_cli("check", str(EXERCISES[4]))
    # the blank ex05 still holds the buggy program: q1's backward raises, q2 is unanswered
    assert done.returncode == 0 and "0 / 5 points" in done.stdout
    assert "✗ q1" in done.stdout and "modified by an inplace operation" in done.stdout
    assert "✗ q2" in done.stdout and "set `q2_versions` to your answer" in done.stdout
    release = tmp_path / "release"
    done = run_cli("release", str(release))
    assert done.returncode == 0
    released = sorted(p.name for p in release.glob("*.ipynb"))
    assert released == [p.name for p in EXERCISES]
    for path in release.glob("*.ipynb"):
        text = path.read_text()
        assert '"outputs": []' in text and "ctx.save_for_backward(y)" not in text
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(SOLUTIONS[0], subs / "ann.ipynb")
    done = run_cli("grade", str(subs), "--out", str(tmp_path / "res"), "--jobs", "1", "--shard", "1/1")
    assert done.returncode == 0, done.stderr
    assert "[1/1] ann: 5/5" in done.stderr and (tmp_path / "res" / "grades.csv").exists()
    bad = run_cli("grade", str(tmp_path / "nope"), "--out", str(tmp_path / "res"))
    assert bad.returncode == 2 and "no such folder" in bad.stderr
    bad = run_cli("grade", str(subs), "--out", str(tmp_path / "res"), "--shard", "3/2")
    assert bad.returncode == 2 and "shard" in bad.stderr
    merged = run_cli("grades", str(tmp_path / "res"))
    assert merged.stdout.splitlines()[1].startswith("ann,5,5,5,1,1,3,")  # score, max, ex01, its questions
    book = run_cli("grades", str(tmp_path / "res"), "--out", str(tmp_path / "book"))
    assert book.returncode == 0 and (tmp_path / "book" / "feedback" / "ann.md").exists()
    assert os.path.exists(tmp_path / "res" / "ann" / "report.json")
