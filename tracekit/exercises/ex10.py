"""ex10 · Build a tape yourself: rules for div, tanh and sin, beyond the lesson's mul, exp and sigmoid
(probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import AnswerError, Exercise, Question, dtype_name, lesson_link, student, tensor_of

LESSON = "11_build_a_tape"
ARITY = {"div": 2, "tanh": 1, "sin": 1}
# the shape of an answer: a forward and a backward function, and the pair
RULE = '''def {op}_forward({args}):
    {fwd}


def {op}_backward(saved, grad):
    {bwd}


{op}_rule = ({op}_forward, {op}_backward)'''


def rule_code(op: str, forward: str, backward: str) -> str:
    """An answer cell for op's rule, from the bodies of its forward and backward (indented 4)."""
    return RULE.format(op=op, args="a, b" if ARITY[op] == 2 else "x", fwd=forward, bwd=backward)


def rule_cells(bodies: dict[str, tuple[str, str]]) -> dict[str, str]:
    """Answer cells {question: code} from {op: (forward body, backward body)}, one per question."""
    return {q.name: rule_code(op, *bodies[op]) for q in EXERCISE.questions
            if (op := q.answer.removesuffix("_rule")) in bodies}


def _draw(op: str):  # noqa: ANN202 - a draw function for one op
    def draw(rng: random.Random) -> dict:
        n, rows, cols = rng.randint(3, 8), rng.randint(2, 3), rng.randint(2, 4)
        values = lambda k: [round(rng.uniform(-3, 3), 4) for _ in range(k)]  # noqa: E731
        away = lambda k: [round(rng.choice([-1, 1]) * rng.uniform(0.5, 3), 4) for _ in range(k)]  # noqa: E731

        def inputs(k: int) -> list[list[float]]:
            return [values(k), away(k)][: ARITY[op]]  # a divisor stays away from zero

        return {"op": op, "cases": [
            {"dtype": "float64", "shape": [n], "inputs": inputs(n), "g": values(n)},
            {"dtype": "float32", "shape": [rows, cols], "inputs": inputs(rows * cols), "g": values(rows * cols)},
        ]}

    return draw


def _role(t: torch.Tensor, named: dict[str, torch.Tensor]) -> str:
    for name, other in named.items():
        if t.untyped_storage().data_ptr() == other.untyped_storage().data_ptr() and t.shape == other.shape:
            return name
    return "a new tensor"


def tensors(case: dict) -> list[torch.Tensor]:
    """The drawn inputs of one case."""
    return [tensor_of(case, v) for v in case["inputs"]]


def _probe(rule: object, inputs: dict) -> dict:
    """Both forwards first, then both backwards (the later one first), without autograd:
    outputs, input gradients, and what each forward saved (which tensor it is, by storage)."""
    if not (isinstance(rule, tuple | list) and len(rule) == 2 and all(callable(f) for f in rule)):
        raise AnswerError("give a pair (forward, backward) of functions")
    forward, backward = rule
    names = ["a", "b"] if len(inputs["cases"][0]["inputs"]) == 2 else ["x"]
    runs = []
    with torch.no_grad():
        for case in inputs["cases"]:
            xs = tensors(case)
            got = student(forward, *xs)
            if not (isinstance(got, tuple | list) and len(got) == 2 and isinstance(got[0], torch.Tensor)
                    and isinstance(got[1], tuple | list) and all(isinstance(t, torch.Tensor) for t in got[1])):
                raise AnswerError("forward should return (output, saved), saved a tuple of tensors")
            runs.append((xs, got[0], tuple(got[1])))
        out = [None] * len(runs)
        for i in reversed(range(len(runs))):
            xs, y, saved = runs[i]
            case = inputs["cases"][i]
            g = torch.tensor(case["g"], dtype=y.dtype).reshape(case["shape"])  # in y's dtype, whatever it is
            grads = student(backward, saved, g)
            grads = grads if isinstance(grads, tuple | list) else (grads,)
            if len(grads) != len(xs) or not all(isinstance(t, torch.Tensor) and t.shape == xs[0].shape for t in grads):
                raise AnswerError(f"backward should return {len(xs)} gradient tensor(s), one per input, of its shape")
            named = {**dict(zip(names, xs)), "the output": y}
            out[i] = {"y": y.double().flatten().tolist(), "dtype": dtype_name(y),
                      "grads": [t.double().flatten().tolist() for t in grads],
                      "saved": sorted(_role(t, named) for t in saved)}
    return {"cases": out}


def _question(name: str, points: int, op: str, formula: str) -> Question:
    return Question(name, points, f"{op}_rule = (forward, backward) for y = {formula} on a tape, saving what "
                    f"PyTorch's own {op} saves", f"{op}_rule", probe=_probe, draw=_draw(op), kind="code", details=(
                        f"`forward({'a, b' if ARITY[op] == 2 else 'x'})` returns `(y, saved)` with y = {formula} "
                        "and `saved` a tuple of the tensors backward will need; `backward(saved, grad)` returns "
                        f"the gradient{'s (grad_a, grad_b)' if ARITY[op] == 2 else ' for x'} from `saved` and "
                        "`grad` alone. Save what PyTorch's own rule saves when every input requires grad — the "
                        "tensors themselves (an input or the output), not copies. The checker runs both "
                        "forwards before any backward, without autograd, on a float64 vector and a float32 "
                        "matrix, and compares with `torch.func.vjp` and with PyTorch's own residuals. How backward "
                        "turns `saved` and `grad` into gradients is yours: writing the formula is the exercise, "
                        "but calling `torch.func.vjp` on the saved values gives the same numbers and the checker "
                        "cannot tell them apart (it does check that only `saved` is used). See "
                        f"{lesson_link(LESSON)}."),
                    stub=rule_code(op, "raise NotImplementedError  # return (y, saved): saved = the tensors backward "
                                       "needs", "raise NotImplementedError  # return the gradient"
                                   f"{'s (grad_a, grad_b)' if ARITY[op] == 2 else ''} from saved and grad only"))


EXERCISE = Exercise(
    "ex10", "Build a tape yourself", LESSON,
    (
        _question("q1", 2, "div", "a / b"),
        _question("q2", 1, "tanh", "tanh(x)"),
        _question("q3", 1, "sin", "sin(x)"),
    ),
    intro=("A tape records, for every op of the forward pass, a backward function and the values it "
           "saved; backward walks the tape in reverse. The lesson wrote the rules for mul, exp and sigmoid; "
           "here you write three more, in the same form: `div`, `tanh` and `sin`. Try them on the lesson's "
           "tape (or the little one here) and compare with `torch.func.vjp` before you check:\n\n"
           "```python\ntape = []\ndef run(rule, *xs):\n    y, saved = rule[0](*xs)\n    tape.append((rule, saved))\n"
           "    return y\n```"),
)
