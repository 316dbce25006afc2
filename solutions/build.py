"""Write the student exercise notebooks (exercises/, stubs only) and the reference
notebooks (solutions/, answers filled in) from the exercise definitions.

    python solutions/build.py

Run it after changing a question in tracekit/exercises/ or an answer in solutions/answers.py.
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from answers import SOLUTIONS  # noqa: E402

import tracekit.exercises as ex  # noqa: E402

STUBS = {
    "ex01": {"q3": '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError  # compute σ(x); save one tensor for backward

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError'''},
    "ex03": {"q1": '''def pinned_bytes(n, k, dtype):
    raise NotImplementedError''', "q2": '''def visible_and_pinned(n, dtype):
    raise NotImplementedError  # return [visible, pinned]'''},
    "ex04": {"q2": '''def second_derivative(f, x):
    raise NotImplementedError'''},
    "ex05": {"q1": '''def fixed(a):
    # the buggy program: make backward work without changing what it computes
    h = a * 2
    y = h.sin()
    h.add_(1)
    return y.sum(), h'''},
    "ex06": {"q1": '''def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()  # a diagnostic, never backwarded
        history.append(val)  # this keeps every step's diagnostic graph alive: fix it
    return history'''},
    "ex07": {"q2": '''def pack(t):
    raise NotImplementedError  # keep t in your store; return a handle that is not a tensor

def unpack(handle):
    raise NotImplementedError

hooks = (pack, unpack)'''},
    "ex08": {"q1": '''from tracekit.exercises.ex08 import plain_loss  # the reference model, for comparison

def loss_fn(x, ws):
    return plain_loss(x, ws)  # same value and gradients, within both budgets'''},
    "ex09": {"q2": '''def adam_state_bytes(model):
    raise NotImplementedError'''},
    "ex10": {name: f'''def {op}_forward({args}):
    raise NotImplementedError  # return (y, saved): saved = the tensors backward needs


def {op}_backward(saved, grad):
    raise NotImplementedError  # return the gradient{s} from saved and grad only


{op}_rule = ({op}_forward, {op}_backward)''' for name, op, args, s in (
        ("q1", "div", "a, b", "s (grad_a, grad_b)"), ("q2", "tanh", "x", ""), ("q3", "sin", "x", ""))},
}

NAMES = {
    "ex01": "ex01_forward_values", "ex02": "ex02_small_trace", "ex03": "ex03_storage",
    "ex04": "ex04_retention", "ex05": "ex05_inplace", "ex06": "ex06_app_references",
    "ex07": "ex07_hooks", "ex08": "ex08_checkpoint", "ex09": "ex09_budget", "ex10": "ex10_build_a_tape",
}


def stub(exercise_id: str, question: ex.Question) -> str:
    """The cell a student starts from: a placeholder for data, a skeleton for code."""
    if question.name in STUBS.get(exercise_id, {}):
        return STUBS[exercise_id][question.name]
    return f"{question.answer} = None  # your answer"


def _imports(exercise: ex.Exercise) -> str:
    """The first code cell: torch and tracekit (lint-clean in the reference notebook too)."""
    used = any("torch" in SOLUTIONS[exercise.id][q.name] for q in exercise.questions)
    return "import torch" + ("" if used else "  # noqa: F401 - for your answers") + "\n\nimport tracekit as tk"


def notebook(exercise: ex.Exercise, with_answers: bool) -> nbformat.NotebookNode:
    """One exercise as a notebook: intro, one prompt + answer cell per question, the self-check."""
    cells = [
        new_markdown_cell(
            f"# {exercise.id} · {exercise.title}\n\n"
            f"Goes with the [lesson `{exercise.lesson}`](../notebooks/{exercise.lesson}.ipynb). Fill in every "
            f"answer cell, run the "
            f"notebook top to bottom, then run the last cell to check yourself. {exercise.max_score} points.\n\n"
            "Your instructor grades the same answers on fresh inputs drawn at grading time, so an answer has "
            "to be right in general, not just for one example. Keep each answer in its own cell, under the "
            "name it is given. A question about a table of cases checks a few cases drawn at random each "
            "time: fill in every case. Code answers are graded from their definitions (imports, `def`, "
            "`class`, literal values): keep the code inside functions and classes."
            + (f"\n\n{exercise.intro}" if exercise.intro else "")
        ),
        new_code_cell(_imports(exercise)),
    ]
    for q in exercise.questions:
        kind = "write code" if q.kind == "code" else "give a value"
        details = f"\n\n{q.details}" if q.details else ""
        cells.append(new_markdown_cell(f"**{q.name}** ({q.points} point{'s' if q.points > 1 else ''}, {kind}): "
                                       f"{q.prompt}.{details}\n\nAnswer in `{q.answer}`."))
        cells.append(new_code_cell(SOLUTIONS[exercise.id][q.name] if with_answers else stub(exercise.id, q)))
    cells.append(new_markdown_cell("### Check yourself"))
    cells.append(new_code_cell(f'tk.check("{exercise.id}")'))
    book = new_notebook(cells=cells)
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.metadata["tracekit"] = {"exercise": exercise.id}
    return book


def main() -> int:
    for exercise_id in ex.IDS:
        exercise = ex.get(exercise_id)
        nbformat.write(notebook(exercise, False), ROOT / "exercises" / f"{NAMES[exercise_id]}.ipynb")
        nbformat.write(notebook(exercise, True), HERE / f"{NAMES[exercise_id]}.ipynb")
        print("wrote", NAMES[exercise_id])
    return 0


if __name__ == "__main__":
    sys.exit(main())
