"""The exercises in-process: reference answers earn full marks on fresh draws, blanks nothing;
the probe side never imports the judges; a checker failure is reported as the checker's."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tracekit as tk
import tracekit.exercises as ex

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "tests"))
from answers import SOLUTIONS  # noqa: E402
from exercise_variants import HEAVY  # noqa: E402


def namespace(exercise_id: str, skip: tuple[str, ...] = ()) -> dict:
    ns = {"torch": torch, "tk": tk}
    for q in ex.get(exercise_id).questions:
        if q.name not in skip:
            exec(SOLUTIONS[exercise_id][q.name], ns)
    return ns


def test_exercises_are_discovered_from_their_modules():
    """An exercise is its module pair, exNN.py and judges/exNN.py: nothing else lists it."""
    folder = ROOT / "tracekit" / "exercises"
    ids = ex.IDS
    assert ids == tuple(sorted(p.stem for p in folder.glob("ex[0-9][0-9].py")))
    assert ids == tuple(sorted(p.stem for p in (folder / "judges").glob("ex[0-9][0-9].py")))
    assert ids == tuple(f"ex{i:02d}" for i in range(1, len(ids) + 1))  # numbered without gaps
    assert set(SOLUTIONS) == set(ex.IDS)
    for exercise_id in ex.IDS:
        exercise = ex.get(exercise_id)
        assert exercise.id == exercise_id
        judges = importlib.import_module(f"tracekit.exercises.judges.{exercise_id}").JUDGES
        assert set(judges) == {q.name for q in exercise.questions}, exercise_id
        assert set(SOLUTIONS[exercise_id]) == {q.name for q in exercise.questions}, exercise_id
        for folder in ("exercises", "solutions"):
            path = ROOT / folder / f"{exercise.notebook}.ipynb"
            assert path.is_file(), f"{path} is missing: run python solutions/build.py"


@pytest.mark.parametrize("exercise_id", [pytest.param(i, marks=[pytest.mark.slow] if i in HEAVY else [])
                                         for i in ex.IDS])
def test_reference_answers_full_marks_and_blank_zero(exercise_id, capsys):
    exercise = ex.get(exercise_id)
    assert exercise.max_score >= 4
    for seed in (1, 2):
        results = tk.check(exercise_id, namespace(exercise_id), seed=seed)
        assert [r["status"] for r in results] == ["correct"] * len(results), results
        assert sum(r["score"] for r in results) == exercise.max_score
    assert f"{exercise.max_score} / {exercise.max_score} points" in repr(results)
    assert "[{" not in repr(results)  # shown as the report, never as a raw list
    blank = tk.check(exercise_id, {})
    assert sum(r["score"] for r in blank) == 0 and {r["status"] for r in blank} == {"missing"}


def test_probe_side_source_names_no_judge():
    import ast

    for path in (ROOT / "tracekit" / "exercises").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "judges" not in (node.module or "") and all("judges" not in a.name for a in node.names), path
            elif isinstance(node, ast.Import):
                assert all("judges" not in a.name for a in node.names), path


@pytest.mark.slow
def test_probe_side_never_imports_the_judges():
    code = ("import sys, tracekit.exercises as ex\n"
            "for i in ex.IDS: ex.get(i)\n"
            "from tracekit.exercises import draw_inputs, probe_all\n"
            "e = ex.get('ex01'); probe_all(e, {}, draw_inputs(e, 0))\n"
            "bad = [m for m in sys.modules if m.startswith('tracekit.exercises.judges')]\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_checker_failure_is_reported_as_the_checkers():
    exercise = ex.get("ex03")

    def broken_probe(answer, inputs):
        raise KeyError("inputs")  # a bug of the checker, not of the answer

    q = exercise.questions[0]
    broken = ex.Exercise(exercise.id, exercise.title, exercise.lesson,
                         (ex.Question(q.name, q.points, q.prompt, q.answer, probe=broken_probe, draw=q.draw,
                                      kind=q.kind),))
    ns = namespace("ex03")
    results = ex.judge_all(broken, ex.probe_all(broken, ns, ex.draw_inputs(broken, 0)), ex.draw_inputs(broken, 0))
    assert results[0]["status"] == "checker_error" and results[0]["message"].startswith("the checker could not")
    judged = ex.judge_all(exercise, {"q1": {"values": "not a list"}, "q2": {"values": [[1, 2]] * 3}},
                          ex.draw_inputs(exercise, 0))
    assert judged[0]["status"] == "wrong" and judged[1]["status"] == "wrong"


def test_readme_table_matches_the_exercises():
    text = (ROOT / "README.md").read_text()
    total = sum(ex.get(i).max_score for i in ex.IDS)
    assert f"{len(ex.IDS)} graded exercises ({total} points)".replace("10 ", "ten ") in text
    for exercise_id in ex.IDS:
        row = next(line for line in text.splitlines() if line.startswith(f"| {exercise_id} "))
        assert f"| {ex.get(exercise_id).max_score} |" in row


def test_data_answers_must_be_plain_values():
    class Sneaky:
        def __eq__(self, other):
            return True

    class AlwaysEqualDict(dict):
        def __eq__(self, other):
            return True

    results = {r["name"]: r for r in tk.check("ex01", {"q1_slots": Sneaky(), "q2_slots": ["result"]}, seed=0)}
    assert results["q1"]["score"] == 0 and "got Sneaky" in results["q1"]["message"]
    assert results["q2"]["status"] == "wrong" and "expected a dict" in results["q2"]["message"]
    # a Mapping is read as its items: an always-equal dict subclass is just an empty dict
    results = {r["name"]: r for r in tk.check("ex01", {"q1_slots": AlwaysEqualDict(), "q2_slots": None}, seed=0)}
    assert results["q1"]["score"] == 0 and "no entry" in results["q1"]["message"]


def test_standard_kinds_of_values_are_accepted():
    """What the prompt calls a dict, a set or an int may be any mapping, set or integral number."""
    import collections

    import numpy as np
    import torch

    from tracekit.exercises.base import plain

    assert plain(collections.OrderedDict(a={"x"})) == {"a": ["x"]}
    assert plain(collections.defaultdict(set, b=frozenset({"self", "other"}))) == {"b": ["other", "self"]}
    assert plain(np.int64(3)) == 3 and type(plain(np.int64(3))) is int
    assert plain(np.float32(0.5)) == 0.5 and type(plain(np.float32(0.5))) is float
    assert plain(torch.tensor(7)) == 7 and plain((1, 2)) == [1, 2]
    with pytest.raises(tk.exercises.AnswerError):
        plain(torch.ones(3))


def test_self_check_reports_an_answer_whose_cell_no_longer_compiles():
    """Stale kernel state: the answer was defined, then its cell edited into a syntax error and run;
    the grade (a fresh run) would not see the old definition, so neither does the self-check."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.reset(new_session=True)
        shell.run_cell("import torch\nimport tracekit as tk", store_history=True)
        shell.run_cell("def pinned_bytes(n, k, dtype):\n    return 0", store_history=True)
        shell.run_cell("def pinned_bytes(n, k, dtype)\n    return 0", store_history=True)  # the edit: no colon
        results = {r["name"]: r for r in tk.check("ex03", shell.user_ns, seed=1)}
    finally:
        InteractiveShell.clear_instance()  # later tests run outside IPython
    assert results["q1"]["status"] == "missing" and "syntax error" in results["q1"]["message"]
    assert results["q2"]["status"] == "missing" and "syntax error" not in results["q2"]["message"]


def test_the_corpus_readme_lists_every_variant_as_its_header_says():
    """tests/corpus/README.md's tables are what each variant's `# expect:` header says (test_corpus grades
    against the headers): every file listed, none listed twice, no row for a file that is gone."""
    import re

    corpus = ROOT / "tests" / "corpus"
    text = (corpus / "README.md").read_text(encoding="utf-8")
    rows: list[tuple[tuple[str, str], str]] = []
    parts = re.split(r"^### (ex\d\d)\s*$", text, flags=re.M)
    for i in range(1, len(parts), 2):
        body = parts[i + 1].split("\n## ")[0]
        rows += [((parts[i], m[0]), m[1].strip()) for m in re.findall(r"^\| `([^`]+\.py)` \| ([^|]+) \|", body, re.M)]
    table = re.findall(r"^\| (ex\d\d) \| `([^`]+\.py)` \| ([^|]+) \|", text, re.M)  # the exercise-file-expect table
    rows += [((ex, name), expect.strip()) for ex, name, expect in table]
    listed = dict(rows)
    assert len(listed) == len(rows), "a variant listed twice"
    headers = {(f.parent.name, f.name): re.search(r"^# expect:(.*)$", f.read_text(encoding="utf-8", errors="replace"),
                                                   re.M).group(1).strip()
               for f in corpus.glob("ex*/*.py")}
    assert listed == headers
