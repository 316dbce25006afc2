"""ex04 · Retain, recompute or record (probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import (
    AnswerError,
    Exercise,
    Question,
    cases_question,
    dtype_name,
    expect_function,
    lesson_link,
    programs_table,
    student,
    tensor_of,
)

LESSON = "04_retention"
# id -> (program, which inputs require grad); a and b are float32, shapes in the prompt
PROGRAMS = {
    "R1": ("(a * 2).sum()", "a"), "R2": ("(a + b).sum()", "ab"), "R3": ("(a * b).sum()", "a"),
    "R4": ("(a * b).sum()", "b"), "R5": ("a.exp().sum()", "a"), "R6": ("(a - b).pow(2).sum()", "ab"),
    "R7": ("(A @ B).sum()", "a"), "R8": ("a.relu().mean()", "a"), "R9": ("(a.sin() + b).sum()", "b"),
    "R10": ("(a.tanh() * b.exp()).sum()", "ab"),
}
WHO = {"a": "only a (or A)", "b": "only b", "ab": "both"}
FUNCTIONS = {
    "poly_sin": "t**p * torch.sin(c * t)",
    "exp_lin": "torch.exp(c * t) * t**p",
    "tanh_sq": "torch.tanh(c * t) * t**2",
    "log1p_sq": "c * torch.log1p(t**2) + t**p",
    "custom": "Scaled.apply(t, c) * t**p",
}


class Scaled(torch.autograd.Function):
    """sin(c·t) forward, but a backward that defines d/dt as 2·c·cos(c·t): the derivatives autograd
    gives are not the slopes of the forward's values (so finite differences of f disagree). Written
    in the setup_context form, so torch.func transforms (grad, vmap) work on it too."""

    generate_vmap_rule = True

    @staticmethod
    def forward(t: torch.Tensor, c: float) -> torch.Tensor:
        return torch.sin(c * t)

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: torch.Tensor) -> None:  # noqa: ANN001 - autograd's ctx
        t, c = inputs
        ctx.save_for_backward(t)
        ctx.c = c

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        (t,) = ctx.saved_tensors
        return grad * 2 * ctx.c * torch.cos(ctx.c * t), None


def make_f(case: dict):  # noqa: ANN201 - an elementwise function of one tensor
    """The elementwise function f of a drawn case (public: it is part of the question)."""
    p, c = case["p"], case["c"]
    src = FUNCTIONS[case["f"]]
    return lambda t: eval(src, {"torch": torch, "t": t, "p": p, "c": c, "Scaled": Scaled})  # noqa: S307 - ours


def _draw_f(rng: random.Random) -> dict:
    cases = []
    plain = sorted(f for f in FUNCTIONS if f != "custom")
    for dtype, shape, f in (("float64", [rng.randint(3, 7)], rng.choice(plain)),
                            ("float32", [rng.randint(2, 3), rng.randint(2, 4)], rng.choice(plain)),
                            ("float64", [rng.randint(3, 7)], "custom")):
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        cases.append({"f": f, "p": rng.randint(1, 3), "c": round(rng.uniform(0.5, 2.0), 3),
                      "dtype": dtype, "shape": shape, "x": [round(rng.uniform(-1.5, 1.5), 3) for _ in range(n)]})
    return {"cases": cases}


def _probe_second(fn: object, inputs: dict) -> dict:
    """Call second_derivative twice per case on the same x (a float64 vector, a float32 matrix)."""
    expect_function(fn, "second_derivative(f, x)")
    out = []
    for case in inputs["cases"]:
        x = tensor_of(case, case["x"]).requires_grad_()
        calls = []
        for _ in range(2):
            h = student(fn, make_f(case), x)
            if not isinstance(h, torch.Tensor) or h.shape != x.shape:
                raise AnswerError("return a tensor of x's shape: d²f/dx² at each element")
            calls.append(h.detach().flatten().tolist())
        out.append({"calls": calls, "dtype": dtype_name(h)})
    return {"cases": out}


EXERCISE = Exercise(
    "ex04", "Retain, recompute or record", LESSON,
    (
        cases_question("q1", 2, "for each program: the set of saved values ('Node.slot') a second y.backward() "
                       "would need, that the first y.backward() released", "q1_needs", PROGRAMS, details=(
                     "`a`, `b` are float32 vectors of length 5; `A` is 2×3 and `B` 3×4 (float32). Programs, "
                     "and which inputs require grad:\n\n" + programs_table(PROGRAMS, WHO) +
                     "\n\nFor each program, give the **set** of residuals, each `\"NodeName.slot\"` (e.g. "
                     "`\"ExpBackward0.result\"`), that `y.backward()` (retain_graph=False) releases and a "
                     "second backward would need; an empty set if there are none. A second backward raises "
                     "exactly when it needs a released value. (A graph that saves nothing can in fact be "
                     "backwarded twice on torch 2.13, but that is an implementation detail: the documented "
                     "contract is `retain_graph=True`.)"), see=f"See {lesson_link(LESSON)}."),
        Question("q2", 3, "second_derivative(f, x): d²f/dx² at each element of x (f is elementwise)",
                 "second_derivative", probe=_probe_second, draw=_draw_f, kind="code", details=(
                     "`f` is an elementwise function of a tensor (e.g. `t**p * torch.sin(c*t)`), `x` a tensor "
                     "that requires grad: float64 or float32, a vector or a matrix. Return a tensor of x's "
                     "shape and dtype holding f''(x) at each element, as autograd defines it: differentiate f's "
                     "first derivative with autograd (exact to rounding). Finite differences will not do: they "
                     "are not precise enough, and some test functions are built from a custom "
                     "`autograd.Function` whose backward defines the derivative (as custom Functions may), so "
                     "slopes of f's values give other numbers. The checker calls your function twice on "
                     "the same x: the second call must give the same result (mind what accumulates in "
                     f"`x.grad`). See {lesson_link(LESSON)} (create_graph)."),
                 stub="def second_derivative(f, x):\n    raise NotImplementedError"),
    ),
)
