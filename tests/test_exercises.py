"""The exercises in-process: reference answers earn full marks, blanks nothing, partial work
partial credit; self-check messages never give the answer away."""

import sys
from pathlib import Path

import pytest
import torch

import tracekit as tk
import tracekit.exercises as ex

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "solutions"))
from answers import SOLUTIONS  # noqa: E402


def namespace(exercise_id: str, skip: tuple[str, ...] = ()) -> dict:
    ns = {"torch": torch, "tk": tk}
    for q in ex.get(exercise_id).questions:
        if q.name not in skip:
            exec(SOLUTIONS[exercise_id][q.name], ns)
    return ns


@pytest.mark.parametrize("exercise_id", ex.IDS)
def test_reference_answers_full_marks_on_fresh_inputs_and_blank_zero(exercise_id, capsys):
    exercise = ex.get(exercise_id)
    assert len(exercise.questions) >= 1 and exercise.max_score >= 4
    results = tk.check(exercise_id, namespace(exercise_id))
    assert sum(r["score"] for r in results) == exercise.max_score
    assert f"{exercise.max_score} / {exercise.max_score} points" in capsys.readouterr().out
    blank = tk.check(exercise_id, {})
    assert sum(r["score"] for r in blank) == 0


def test_partial_credit_and_messages_without_answers(capsys):
    ns = namespace("ex01", skip=("q3",))

    class Sigmoid(torch.autograd.Function):  # right values, but it saves the input
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sigmoid(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x)
            return grad * s * (1 - s)

    ns["Sigmoid"] = Sigmoid
    ns["q2_slot"] = "self"  # wrong
    results = {r["name"]: r for r in tk.check("ex01", ns)}
    assert results["q3"]["score"] == pytest.approx(2.0) and "make it the output" in results["q3"]["message"]
    assert results["q2"]["score"] == 0 and "result" not in results["q2"]["message"]
    out = capsys.readouterr().out
    assert "✗ q2" in out and "~ q3" in out


def test_data_answers_must_be_plain_values():
    class Sneaky(list):
        def __eq__(self, other):
            return True

    results = {r["name"]: r for r in tk.check("ex01", {"q1_slots": Sneaky(), "q2_slot": "result"})}
    assert results["q1"]["score"] == 0 and "got Sneaky" in results["q1"]["message"]
    assert results["q2"]["score"] == 1
