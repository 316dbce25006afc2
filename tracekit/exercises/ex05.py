"""ex05 · In-place mutation and version counters (probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import AnswerError, Exercise, Question, cases_question, expect_function, lesson_link, md_table, student

LESSON = "05_inplace"
# id -> (code before y = h.sin(), code after it); h = a * 2, a a float32 vector of length 4 requiring grad
VERSIONS = {
    "V1": ("", "h.mul_(3); h.add_(1)"),
    "V2": ("h.add_(1)", "h.mul_(2)"),
    "V3": ("", "h[0].mul_(2)"),
    "V4": ("", "with torch.no_grad(): h.add_(1)"),
    "V5": ("", "h.detach().zero_()"),
    "V6": ("", "h.data.add_(1)"),
    "V7": ("h.add_(1); h.sub_(1)", "h.mul_(2); h.mul_(2); h.mul_(2)"),
    "V8": ("", "v = h[1:]; v.mul_(2); v.add_(1)"),
    "V9": ("h.exp_()", ""),
}


BUGGY = '''def fixed(a):
    # the buggy program: make backward work without changing what it computes
    h = a * 2
    y = h.sin()
    h.add_(1)
    return y.sum(), h'''


def _code(src: str) -> str:
    return f"`{src}`" if src else "—"


def _draw(rng: random.Random) -> dict:
    rows, cols = rng.randint(2, 3), rng.randint(2, 4)
    return {"cases": [
        {"dtype": "float64", "shape": [rng.randint(3, 8)]},
        {"dtype": "float32", "shape": [rows, cols]},
    ], "values": [round(rng.uniform(-2, 2), 3) for _ in range(max(8, rows * cols))],
        "weight": round(rng.uniform(1.5, 3.0), 3)}


def case_input(inputs: dict, i: int) -> torch.Tensor:
    """The drawn `a` of case i (float64 vector, float32 matrix), requiring grad."""
    case = inputs["cases"][i]
    n = 1
    for d in case["shape"]:
        n *= d
    a = torch.tensor(inputs["values"][:n], dtype=getattr(torch, case["dtype"]))
    return a.reshape(case["shape"]).requires_grad_()


def _probe_fixed(fn: object, inputs: dict) -> dict:
    """Call fixed(a); run backward on its loss unless the function already did (the reorder fix)."""
    expect_function(fn, "fixed(a)")
    out = []
    for i in range(len(inputs["cases"])):
        a = case_input(inputs, i)
        # a gradient hook on a: a real backward through a scales what reaches a.grad by the drawn weight;
        # a gradient written by hand into a.grad does not pass through it
        a.register_hook(lambda g, w=inputs["weight"]: g * w)
        got = student(fn, a)
        if not (isinstance(got, tuple | list) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
            raise AnswerError("fixed(a) should return two tensors: (loss, h_next)")
        loss, h_next = got
        ran_backward = a.grad is not None
        if not ran_backward:
            student(loss.backward)
        out.append({"loss": loss.detach().double().sum().item(), "loss_numel": loss.numel(),
                    "h_next": h_next.detach().double().flatten().tolist(), "h_shape": list(h_next.shape),
                    "grad": None if a.grad is None else a.grad.double().flatten().tolist(),
                    "backward_by": "you" if ran_backward else "checker"})
    return {"cases": out}


EXERCISE = Exercise(
    "ex05", "In-place mutation, diagnosed and fixed", LESSON,
    (
        Question("q1", 3, "fixed(a): the same loss and next h as the buggy program, with a working backward",
                 "fixed", probe=_probe_fixed, draw=_draw, kind="code", details=(
                     "The buggy program (in the cell below) computes `h = a * 2`, `y = h.sin()`, then updates "
                     "`h` in place (`h.add_(1)`) and returns `(y.sum(), h)`; backward then fails because sin "
                     "saved `h`. Change it so that it returns the same two values — the loss `sum(sin(2a))` "
                     "and the next `h = 2a + 1` — and a.grad ends up as d loss/da. Either fix the lesson "
                     "teaches is accepted: update h out of place (the checker then calls `loss.backward()`), or "
                     "reorder so that your function calls `loss.backward()` itself before the in-place update "
                     "(the checker sees `a.grad` is set and does not call it again). The checker attaches a gradient "
                     "hook to `a` that scales what backward delivers, so `a.grad` must come from a real backward "
                     "through the graph — a gradient written by hand does not count. `a` is float64 or float32, "
                     "a vector or a matrix, and requires grad. Silencing the version check (`.data`) gives "
                     f"wrong gradients. See {lesson_link(LESSON)}."), stub=BUGGY),
        cases_question("q2", 2, "for each program: [version of h when sin saved it, version of h when backward "
                       "reads it]", "q2_versions", VERSIONS, details=(
                     "Each program is `h = a * 2` (a: float32, length 4, requires grad), then the *before* "
                     "code, then `y = h.sin()` (which saves h), then the *after* code:\n\n" +
                     md_table(["id", "before", "after"], [(f"`{k}`", _code(b), _code(a))
                                                         for k, (b, a) in VERSIONS.items()]) +
                     "\n\nFor each give `[saved, now]`: h's version counter (`h._version`) when sin saved it, "
                     "and when backward would read it."),
                       see=f"See {lesson_link(LESSON)}: which writes bump the counter, and which tensors share it."),
    ),
)
