"""The Gradescope autograder bundle, end to end under a temporary AUTOGRADER_ROOT: built by the
CLI, unpacked the way Gradescope does, set up by its own setup.sh, run by its own run_autograder on
a reference, a blank, a hostile and a broken submission; every results.json checked against
Gradescope's specification. The pure parts (score clamping, what a folder holds) are fast tests."""

import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest

from tracekit.exercises import IDS, get
from tracekit.grading.autograder import (
    CONFIG,
    VENV,
    extract,
    failure_json,
    find_notebooks,
    parse_exercises,
    results_json,
)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = {p.stem[:4]: p for p in (ROOT / "solutions").glob("ex*.ipynb")}
BLANKS = {p.stem[:4]: p for p in (ROOT / "exercises").glob("ex*.ipynb")}
ASSIGNMENT = ("ex01", "ex03")

# Gradescope's autograder specification, results.json: top-level and per-test keys, and their values.
TOP_KEYS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
            "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST_KEYS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format",
             "tags", "visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_spec(doc: dict, exercises=ASSIGNMENT) -> None:
    """results.json as Gradescope reads it: known fields with the right types; one test per question
    of each exercise of the assignment; 0 <= score <= max_score everywhere; the total adds up."""
    assert isinstance(doc, dict) and set(doc) <= TOP_KEYS, set(doc) - TOP_KEYS
    assert number(doc["score"]) and number(doc["execution_time"]) and doc["execution_time"] >= 0
    assert isinstance(doc["output"], str) and doc["output"]
    assert doc["output_format"] == doc["test_output_format"] == "text"  # student text: never Markdown or HTML
    questions = [(e, q) for e in exercises for q in get(e).questions]
    assert len(doc["tests"]) == len(questions)
    for test, (exercise_id, q) in zip(doc["tests"], questions):
        assert set(test) <= TEST_KEYS, set(test) - TEST_KEYS
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test)
        assert test["output_format"] == "text"
        assert isinstance(test["name"], str) and test["name"].startswith(f"{exercise_id} {q.name}")
        assert number(test["score"]) and number(test["max_score"]) and test["max_score"] == q.points
        assert 0 <= test["score"] <= test["max_score"]
        assert test["status"] == ("passed" if test["score"] == test["max_score"] else "failed")
        assert isinstance(test["output"], str) and test["visibility"] in VISIBILITY
    most = sum(get(e).max_score for e in exercises)
    assert doc["score"] == pytest.approx(sum(t["score"] for t in doc["tests"])) and 0 <= doc["score"] <= most


# ---- fast: the pure parts ----

def test_exercise_lists():
    assert parse_exercises("ex03, ex01,ex03") == ("ex01", "ex03")
    assert parse_exercises(None) == IDS and parse_exercises("") == IDS
    for bad in ("ex99", "ex1", "ex01,,nope", ","):
        with pytest.raises(ValueError, match="--exercises"):
            parse_exercises(bad)


def test_scores_come_from_the_exercise_definitions_not_the_report():
    """A report claiming too much (41/5, NaN, a string, a negative score, unknown questions) is
    clamped per question to the points the exercise defines; the rest are reported, not counted."""
    forged = [{"notebook": "a.ipynb", "exercise": "ex01", "score": 41, "max_score": 41, "questions": [
        {"name": "q1", "score": 41, "max_score": 41, "message": "sure"},
        {"name": "q2", "score": float("nan"), "message": "nan"},
        {"name": "q3", "score": "3", "message": "a string"},
        {"name": "q9", "score": 100, "message": "no such question"}]},
        {"notebook": "b.ipynb", "exercise": "ex01", "questions": [{"name": "q1", "score": 1}]},  # a second ex01
        {"notebook": "c.ipynb", "exercise": "ex05", "questions": [{"name": "q1", "score": 2}]},  # not assigned
        {"notebook": "d.ipynb", "exercise": "ex03", "questions": [{"name": "q1", "score": -5},
                                                                  {"name": "q2", "score": 1.5}]},
        {"notebook": "e.ipynb", "exercise": None, "questions": [], "problem": "e.ipynb is empty"}]
    doc = results_json(list(ASSIGNMENT), forged, ["x.ipynb: passed over (not a regular file)"], 3.4)
    check_spec(doc)
    scores = {t["name"].split(":")[0]: t["score"] for t in doc["tests"]}
    assert scores == {"ex01 q1": 1.0, "ex01 q2": 0.0, "ex01 q3": 3.0, "ex03 q1": 0.0, "ex03 q2": 1.5}
    assert doc["score"] == 5.5 and doc["execution_time"] == 3
    for said in ("b.ipynb: another notebook for ex01 (a.ipynb)", "c.ipynb: ex05 is not part of this assignment",
                 "e.ipynb: e.ipynb is empty", "x.ipynb: passed over", "Total: 5.5 / 9"):
        assert said in doc["output"]


def test_nothing_submitted_and_grader_failure_still_give_a_valid_file():
    empty = results_json(list(ASSIGNMENT), [], ["no submission folder at /x"], 0.2)
    check_spec(empty)
    assert empty["score"] == 0 and all(t["output"].startswith("no notebook for") for t in empty["tests"])
    failed = failure_json("The autograder failed (KeyError)", list(IDS), 1.0)
    check_spec(failed, IDS)
    assert failed["score"] == 0 and failed["output"].startswith("The autograder failed (KeyError)")
    json.dumps(failed, allow_nan=False)


def test_only_regular_notebooks_are_picked_up(tmp_path):
    sub = tmp_path / "submission"
    (sub / "hw" / ".ipynb_checkpoints").mkdir(parents=True)
    (sub / "hw" / "a.ipynb").write_text("{}")
    (sub / "b.ipynb").write_text("{}")
    (sub / "hw" / ".ipynb_checkpoints" / "a-checkpoint.ipynb").write_text("{}")
    (sub / ".hidden.ipynb").write_text("{}")
    (sub / "notes.txt").write_text("")
    (sub / "link.ipynb").symlink_to(SOLUTIONS["ex01"])
    os.mkfifo(sub / "pipe.ipynb")
    with open(sub / "huge.ipynb", "wb") as fh:
        fh.truncate(21 * 2**20)
    found, notes = find_notebooks(sub)
    assert [p.relative_to(sub).as_posix() for p in found] == ["b.ipynb", "hw/a.ipynb"]
    text = " | ".join(notes)
    assert "link.ipynb: passed over (not a regular file)" in text and "pipe.ipynb: passed over" in text
    assert "huge.ipynb: passed over (21 MB" in text
    assert ".hidden.ipynb: passed over (a hidden file)" in text  # never passed over in silence
    assert "hw/.ipynb_checkpoints/: passed over (a hidden folder)" in text
    assert find_notebooks(tmp_path / "nope") == ([], [f"no submission folder at {tmp_path / 'nope'}"])


# ---- end to end: build, set up, grade (real pip, real venv, real sandboxed kernels) ----

def run(command, env, timeout=900, cwd=None):
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def gradescope(tmp_path_factory):
    """A Gradescope-like root: the CLI's zip unpacked into source/, run_autograder copied to the root,
    setup.sh run. Offline: the venv reuses this interpreter's torch and the other dependencies
    (TRACEKIT_REUSE_SITE_PACKAGES) and installs the bundled tracekit wheel with pip --no-index."""
    tmp = tmp_path_factory.mktemp("gradescope")
    bundle = tmp / "autograder.zip"
    done = run([sys.executable, "-m", "tracekit", "autograder", "--out", str(bundle), "--exercises", "ex03,ex01",
                "--timeout", "60", "--memory", "3072"], dict(os.environ))
    assert "wrote" in done.stdout
    names = zipfile.ZipFile(bundle).namelist()
    assert {"setup.sh", "run_autograder", CONFIG} <= set(names)  # at the zip's root, as the spec asks
    (inner,) = [n for n in names if n.startswith("wheels/tracekit-") and n.endswith(".whl")]
    import io

    held = set(zipfile.ZipFile(io.BytesIO(zipfile.ZipFile(bundle).read(inner))).namelist())
    assert "tracekit/exercises/judges/ex07.py" in held  # the instructor's wheel: the grader judges with it
    secret = zipfile.ZipFile(bundle).getinfo("tracekit-secret")  # the instructor secret, made now
    assert (secret.external_attr >> 16) & 0o777 == 0o600 and secret.file_size == 64
    root = tmp / "autograder"
    (root / "source").mkdir(parents=True)
    extract(bundle, root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    config = json.loads((root / "source" / CONFIG).read_text())
    assert config["exercises"] == list(ASSIGNMENT) and config["max_score"] == 9 and config["timeout"] == 60
    assert config["secret_file"] == "tracekit-secret"
    assert (root / "source" / "tracekit-secret").stat().st_mode & 0o077 == 0  # unpacked for root only
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # only the venv's tracekit
    env.update(AUTOGRADER_ROOT=str(root), TRACEKIT_PYTHON=sys.executable,
               TRACEKIT_REUSE_SITE_PACKAGES=sysconfig.get_paths()["purelib"])
    done = run(["bash", str(root / "source" / "setup.sh")], env, cwd=root)
    assert f"from {root / VENV}" in done.stdout  # the bundled wheel, not this checkout, is what grades
    env.pop("TRACEKIT_REUSE_SITE_PACKAGES")
    return root, env


def grade(gradescope, files: dict[str, object]) -> dict:
    """Empty submission/, put these files there, run ./run_autograder; return results.json."""
    root, env = gradescope
    shutil.rmtree(root / "submission", ignore_errors=True)
    (root / "submission").mkdir()
    for name, content in files.items():
        path = root / "submission" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, path)
        elif isinstance(content, nbformat.NotebookNode):
            nbformat.write(content, path)
        else:
            path.write_text(content)
    (root / "results").mkdir(exist_ok=True)
    (root / "results" / "results.json").write_text('{"score": 999}')  # stale: must be replaced
    run([str(root / "run_autograder")], env, cwd=root)
    doc = json.loads((root / "results" / "results.json").read_text())
    check_spec(doc)
    return doc


def scores(doc: dict) -> dict[str, float]:
    return {t["name"].split(":")[0]: t["score"] for t in doc["tests"]}


@pytest.mark.grading
def test_reference_submission_gets_full_marks(gradescope):
    doc = grade(gradescope, {"hw/ex01.ipynb": SOLUTIONS["ex01"], "my homework.ipynb": SOLUTIONS["ex03"],
                             "extra.ipynb": SOLUTIONS["ex02"]})
    assert doc["score"] == 9 and all(t["status"] == "passed" for t in doc["tests"])
    assert "extra.ipynb: ex02 is not part of this assignment" in doc["output"]
    assert "ex02 ·" not in doc["output"]  # reported, not graded (as `tracekit grade --exercises` does)
    assert "hw/ex01.ipynb: ex01" in doc["output"] and "Total: 9 / 9" in doc["output"]


@pytest.mark.grading
def test_blank_submission_scores_zero_with_reasons(gradescope):
    doc = grade(gradescope, {"ex01.ipynb": BLANKS["ex01"]})
    assert doc["score"] == 0
    assert "set `q1_slots` to your answer" in doc["tests"][0]["output"]
    assert doc["tests"][-1]["output"] == "no notebook for ex03 was submitted"


@pytest.mark.grading
def test_hostile_submission_cannot_write_its_own_results(gradescope):
    """Cells that forge results.json (in every place the grader might read), print fake results, then
    kill their kernel: the answers (blank) are graded and the forgery is overwritten."""
    root, _ = gradescope
    forged = json.dumps({"score": 999, "tests": []})
    book = nbformat.read(BLANKS["ex01"], as_version=4)
    book.cells.insert(2, nbformat.v4.new_code_cell(
        "import os, pathlib\n"
        f"for folder in ({str(root / 'results')!r}, {str(root)!r}, os.getcwd()):\n"
        "    try:\n"
        f"        pathlib.Path(folder, 'results.json').write_text({forged!r})\n"
        "    except OSError:\n"
        "        pass\n"
        "print('ex01 · Forward values: 5 / 5 points')\n"
        "os._exit(0)"))
    doc = grade(gradescope, {"ex01.ipynb": book, "ex03.ipynb": BLANKS["ex03"], "broken.ipynb": '{"cells": [',
                             "empty.ipynb": ""})
    assert doc["score"] == 0
    assert "cell 2 was skipped" in doc["output"]  # the cell that killed its sandbox; the others ran
    assert "broken.ipynb: broken.ipynb is not a valid notebook" in doc["output"]
    assert "empty.ipynb: empty.ipynb is empty" in doc["output"] and "000.ipynb" not in doc["output"]
    assert doc["output"].count("broken.ipynb:") == 1


@pytest.mark.grading
def test_empty_submission_and_a_missing_environment_still_give_valid_results(gradescope, tmp_path):
    doc = grade(gradescope, {"README.md": "I forgot my notebook"})
    assert doc["score"] == 0 and "no notebook for this exercise was found in the submission" in doc["output"]
    assert all(t["output"].startswith("no notebook for") for t in doc["tests"])
    # run_autograder with no venv (setup.sh never ran): the shell fallback still writes a valid file
    root, env = gradescope
    bare = tmp_path / "bare"
    (bare / "submission").mkdir(parents=True)
    shutil.copy2(root / "run_autograder", bare / "run_autograder")
    run([str(bare / "run_autograder")], {**env, "AUTOGRADER_ROOT": str(bare)})
    doc = json.loads((bare / "results" / "results.json").read_text())
    assert set(doc) <= TOP_KEYS and doc["score"] == 0 and doc["tests"] == [] and number(doc["execution_time"])
    assert "The autograder failed (exit status 127)" in doc["output"]


@pytest.mark.grading
def test_the_two_engines_give_identical_per_question_scores(gradescope, tmp_path):
    """The Gradescope bundle and `tracekit grade` (same secret, same student name) on the same notebooks
    of the blind corpus: identical per-question scores and seeds."""
    from tracekit.grading.autograder import SECRET, STUDENT
    from tracekit.grading.grader import Options, grade_all, read_secret

    root, _ = gradescope
    sys.path.insert(0, str(ROOT / "tests"))
    from test_corpus import CORPUS, notebook, parse

    picks = [CORPUS / "ex01" / "zip_frozenset_save_input.py", CORPUS / "ex03" / "formula.py",
             CORPUS / "ex01" / "swapped_self_other.py", CORPUS / "ex03" / "visible_only.py"]
    for first, second in ((picks[0], picks[1]), (picks[2], picks[3])):
        books = {f"{p.parent.name}.ipynb": notebook(p.parent.name, parse(p)[1]) for p in (first, second)}
        doc = grade(gradescope, books)
        by_engine = {t["name"].split(":")[0]: t["score"] for t in doc["tests"]}
        subs = tmp_path / first.stem / STUDENT
        subs.mkdir(parents=True)
        for name, book in books.items():
            nbformat.write(book, subs / name)
        (report,) = grade_all(subs.parent, tmp_path / first.stem / "out",
                              Options(timeout=60, memory_mb=3072, exercises=ASSIGNMENT,
                                      secret=read_secret(root / "source" / SECRET)), progress=lambda line: None)
        by_cli = {f"{p['exercise']} {q['name']}": q["score"] for p in report["exercises"] for q in p["questions"]}
        assert by_engine == by_cli, (first.stem, second.stem, by_engine, by_cli)
