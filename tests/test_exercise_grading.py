"""The exercise variants (tests/exercise_variants.py) as notebooks, graded by `tracekit grade`
in real sandboxed kernels: the scores the trusted grader gives must be exactly the scores the
in-process checks give. One `tracekit grade` run for the whole batch.

By default each exercise contributes its first correct alternative (not the reference, which
tests/test_grading.py grades) and its first wrong or gaming variant: 20 notebooks. Set
TRACEKIT_ALL_VARIANTS=1 to grade every variant (about 70 notebooks), TRACEKIT_VARIANTS=ex07,ex08
to grade only some exercises."""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import tracekit.exercises as ex

pytestmark = pytest.mark.grading
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from exercise_variants import VARIANTS  # noqa: E402


def chosen() -> list[tuple[str, int, str, dict, dict]]:
    """(exercise, index, label, overrides, expected) of the variants graded in this run."""
    only = [e for e in os.environ.get("TRACEKIT_VARIANTS", "").split(",") if e]
    everything = os.environ.get("TRACEKIT_ALL_VARIANTS") == "1"
    picked = []
    for exercise_id, variants in VARIANTS.items():
        if only and exercise_id not in only:
            continue
        full = ex.get(exercise_id).max_score
        right = [i for i, v in enumerate(variants) if sum(v[2].values()) == full and i > 0]
        wrong = [i for i, v in enumerate(variants) if sum(v[2].values()) < full]
        for i in (range(len(variants)) if everything else right[:1] + wrong[:1]):
            label, overrides, expected = variants[i]
            picked.append((exercise_id, i, label, overrides, expected))
    return picked


def notebook(exercise_id: str, overrides: dict[str, str]) -> nbformat.NotebookNode:
    """The student notebook with the variant's answers typed into the answer cells (the
    reference answers where the variant says nothing), as a student would."""
    from answers import SOLUTIONS  # on the path once exercise_variants is imported

    book = nbformat.read(ROOT / "exercises" / f"{ex.get(exercise_id).notebook}.ipynb", as_version=4)
    for i, q in enumerate(ex.get(exercise_id).questions):
        cell = book.cells[3 + 2 * i]
        assert cell.cell_type == "code"
        cell.source = overrides.get(q.name, SOLUTIONS[exercise_id][q.name])
    return book


def test_variants_graded_by_tracekit_grade_score_exactly(tmp_path):
    subs, out = tmp_path / "submissions", tmp_path / "results"
    subs.mkdir()
    picked = chosen()
    for exercise_id, i, _, overrides, _ in picked:
        nbformat.write(notebook(exercise_id, overrides), subs / f"{exercise_id}-v{i}.ipynb")
    done = subprocess.run([sys.executable, "-m", "tracekit", "grade", str(subs), "--out", str(out), "--jobs", "2"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    wrong = []
    for exercise_id, i, label, _, expected in picked:
        report = json.loads((out / f"{exercise_id}-v{i}" / "report.json").read_text())
        (part,) = report["exercises"]
        got = {q["name"]: q["score"] for q in part["questions"]}
        if got != pytest.approx(expected):
            wrong.append((exercise_id, label, got, expected, [q["message"] for q in part["questions"]],
                          part.get("sandbox", {}).get("notes")))
        assert not any("checker could not" in q["message"] for q in part["questions"]), (exercise_id, label)
    assert not wrong, wrong
