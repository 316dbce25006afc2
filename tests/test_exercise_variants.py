"""Every exercise against answers a student might give (tests/exercise_variants.py): at least
three correct variants earn full marks and at least three wrong or gaming ones earn exactly
their partial score, on several fresh draws, with no checker error."""

import sys
from pathlib import Path

import pytest
import torch

import tracekit as tk
import tracekit.exercises as ex

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "solutions"))
sys.path.insert(0, str(ROOT))
from answers import SOLUTIONS  # noqa: E402
from exercise_variants import HEAVY, VARIANTS  # noqa: E402


def answers(exercise_id: str, overrides: dict[str, str]) -> dict:
    """A notebook namespace: the variant's cells, the reference for the others."""
    ns = {"torch": torch, "tk": tk}
    for q in ex.get(exercise_id).questions:
        exec(overrides.get(q.name, SOLUTIONS[exercise_id][q.name]), ns)
    return ns


def cases():
    for exercise_id, variants in VARIANTS.items():
        for label, overrides, expected in variants:
            heavy = exercise_id in HEAVY or any("torch.func" in src for src in overrides.values())
            yield pytest.param(exercise_id, overrides, expected, id=f"{exercise_id}-{label}",
                               marks=[pytest.mark.slow] if heavy else [])


def test_every_exercise_has_three_correct_and_three_wrong_variants():
    assert set(VARIANTS) == set(ex.IDS)
    for exercise_id, variants in VARIANTS.items():
        full = ex.get(exercise_id).max_score
        correct = [v for v in variants if sum(v[2].values()) == full]
        assert len(correct) >= 3 and len(variants) - len(correct) >= 3, exercise_id
        for _, _, expected in variants:
            assert set(expected) == {q.name for q in ex.get(exercise_id).questions}


@pytest.mark.parametrize(("exercise_id", "overrides", "expected"), list(cases()))
def test_variant_scores_exactly(exercise_id, overrides, expected, capsys):
    ns = answers(exercise_id, overrides)
    for seed in (11,) if exercise_id in HEAVY else (11, 12):
        results = tk.check(exercise_id, ns, seed=seed)
        got = {r["name"]: r["score"] for r in results}
        assert got == pytest.approx(expected), (seed, [(r["name"], r["message"]) for r in results])
        assert "checker_error" not in {r["status"] for r in results}
        for r in results:
            if r["score"] < r["max_score"]:
                assert r["message"] and r["message"] != "correct"
    capsys.readouterr()


@pytest.mark.slow
def test_budget_setups_have_a_clear_winner():
    from tracekit.exercises.ex09 import CONFIGS
    from tracekit.exercises.judges.ex09 import ranking

    for config in CONFIGS:
        (_, first), (_, second) = ranking(config)[:2]
        assert first >= 1.9 * second, config
