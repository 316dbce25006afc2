"""The self-check of a student install (no judges): answers compared with the sealed key
(tracekit/exercises/selfcheck_key.json). Every variant of tests/exercise_variants.py is checked the
way a student's `tk.check` checks it: table questions score exactly what the judges give, a right
function scores full, a wrong one less; and the key holds none of the answers it checks."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

import tracekit as tk
import tracekit.exercises as ex
from tracekit.exercises import sealed

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "solutions"))
sys.path.insert(0, str(ROOT))
from answers import SOLUTIONS  # noqa: E402
from exercise_variants import HEAVY, VARIANTS  # noqa: E402


@pytest.fixture
def student_install(monkeypatch):
    """tk.check as in the wheel: the judges are not there."""
    monkeypatch.setattr(sealed, "judges_here", lambda: False)


def answers(exercise_id: str, overrides: dict[str, str]) -> dict:
    ns = {"torch": torch, "tk": tk}
    for q in ex.get(exercise_id).questions:
        exec(overrides.get(q.name, SOLUTIONS[exercise_id][q.name]), ns)  # noqa: S102
    return ns


def cases():
    for exercise_id, variants in VARIANTS.items():
        for label, overrides, expected in variants:
            heavy = exercise_id in HEAVY or any("torch.func" in src for src in overrides.values())
            yield pytest.param(exercise_id, overrides, expected, id=f"{exercise_id}-{label}",
                               marks=[pytest.mark.slow] if heavy else [])


@pytest.mark.parametrize(("exercise_id", "overrides", "expected"), list(cases()))
def test_each_variant_against_the_sealed_key(student_install, exercise_id, overrides, expected, capsys):
    results = tk.check(exercise_id, answers(exercise_id, overrides))
    assert results.note == sealed.SEALED_NOTE
    table = {q.name for q in ex.get(exercise_id).questions if q.kind == "data"}
    for r in results:
        assert r["status"] != "checker_error", r
        want = expected[r["name"]]
        if r["name"] in table:  # every case compared through its digest: what the judges give
            assert r["score"] == pytest.approx(want), (r["name"], r["message"])
        else:  # a function: right is full marks, anything less than right is less than full marks
            assert (r["score"] == r["max_score"]) == (want == r["max_score"]), (r["name"], r["message"], want)
        if r["score"] < r["max_score"]:
            assert r["message"] and r["message"] != "correct"
    capsys.readouterr()


def test_where_the_self_check_runs(tmp_path, monkeypatch):
    """The judges' folder decides: there (a checkout), absent (a student's wheel: the sealed key), or
    there but empty (covered inside a grading sandbox: the self-check does not run); so does the sandbox's
    runner running the cells."""
    assert sealed.judges_here() and not sealed.being_graded()
    monkeypatch.setattr(sealed, "JUDGES_DIR", tmp_path / "judges")
    assert not sealed.judges_here() and not sealed.being_graded()
    (tmp_path / "judges").mkdir()
    assert not sealed.judges_here() and sealed.being_graded()
    assert tk.check("ex03", {}).note == "The self-check does not run here: this notebook is being graded."
    monkeypatch.setattr(sealed, "JUDGES_DIR", tmp_path / "absent")
    assert not sealed.being_graded()
    monkeypatch.setitem(sys.modules, "tracekit.grading.runner", sys.modules["tracekit"])  # the sandbox's runner
    assert sealed.being_graded()


def test_blank_notebooks_score_zero_against_the_key(student_install, capsys):
    for exercise_id in ex.IDS:
        ns = {"torch": torch, "tk": tk}
        for q in ex.get(exercise_id).questions:
            exec(q.starter, ns)  # noqa: S102
        assert [r["score"] for r in tk.check(exercise_id, ns)] == [0] * len(ex.get(exercise_id).questions)
    capsys.readouterr()


def test_the_key_holds_no_answer():
    """No accepted answer of a fixed case is in the key as text (only its salted digest), and no reference
    answer's code is in the shipped package."""
    from tracekit.exercises.judges.sealing import TABLES, VALUES

    key = sealed.load_key()
    text = sealed.KEY_FILE.read_text(encoding="utf-8")
    for (exercise_id, name), (shape, accepted, _) in TABLES.items():
        spec = key[exercise_id]["questions"][name]
        assert spec["kind"] == "table" and set(spec["cases"]) == set(ex.draw_inputs(ex.get(exercise_id))[name]["cases"])
        for case in spec["cases"]:
            for answer in accepted(case):
                canon = sealed.canonical(shape, answer)
                digest = sealed.seal(key[exercise_id]["salt"], f"{exercise_id}\0{name}\0{case}", canon)
                assert digest in spec["cases"][case]
                if len(canon) > 4:  # a long enough answer would be findable as text
                    assert canon not in text and json.dumps(answer) not in text, (exercise_id, name, case)
    for exercise_id, name in VALUES:
        assert all(re.fullmatch(r"[0-9a-f]{32}", d) for ds in key[exercise_id]["questions"][name]["cases"] for d in ds)
    assert '"saved"' not in json.dumps([key["ex10"]["questions"][q]["expect"] for q in ("q1", "q2", "q3")]).replace(
        '"saved": {"sealed"', "")  # what PyTorch saves: sealed
    package = (ROOT.parent / "tracekit").rglob("*.py")
    from tracekit.exercises.judges import ex06, ex07

    for path in package:
        if "judges" not in path.parts:
            source = path.read_text(encoding="utf-8")
            assert ex07.REFERENCE not in source and ex06.REFERENCE not in source, path


@pytest.mark.slow
def test_the_key_is_what_the_judges_build(capsys):
    """The committed key equals a key built now with its salt (run `python solutions/build.py` after
    changing a question, an answer or a judge)."""
    from tracekit.exercises.judges.sealing import build_key

    committed = sealed.load_key()
    built = json.loads(json.dumps(build_key(SOLUTIONS, next(iter(committed.values()))["salt"])))

    def same(a, b):
        if isinstance(a, float) or isinstance(b, float):
            return abs(a - b) <= 1e-6 * (1 + abs(b))
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    assert same(built, committed)
    capsys.readouterr()
