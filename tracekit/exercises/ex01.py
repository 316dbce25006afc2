"""ex01 · Reverse execution needs forward values (probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import (
    AnswerError,
    AnswerRaised,
    Exercise,
    Question,
    cases_question,
    dtype_name,
    lesson_link,
    student,
    tensor_of,
)

LESSON = "01_forward_values"
BINARY = {"mul": "a * b", "div": "a / b", "mm": "a @ b", "sub": "a - b"}
GRADS = {"a": "only a requires grad", "b": "only b requires grad", "ab": "both require grad"}
Q1_CASES = [f"{op}:{who}" for op in BINARY for who in GRADS]
UNARY = ["exp", "tanh", "sigmoid", "sin", "cos", "log", "sqrt", "relu", "abs", "reciprocal", "expm1", "log1p",
         "rsqrt", "erf", "atan", "neg"]


SIGMOID_STUB = '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError  # compute σ(x); save one tensor for backward

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError'''


def _draw_sigmoid(rng: random.Random) -> dict:
    n = rng.randint(3, 9)
    rows, cols = rng.randint(2, 4), rng.randint(2, 5)
    values = lambda k: [round(rng.uniform(-6, 6), 4) for _ in range(k)]  # noqa: E731
    return {"cases": [
        {"dtype": "float64", "shape": [n], "x": values(n), "g": values(n)},
        {"dtype": "float32", "shape": [rows, cols], "x": values(rows * cols), "g": values(rows * cols)},
    ], "substitute": {"dtype": "float64", "shape": [n], "x": values(n), "x2": values(n), "g": values(n)}}


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same memory (a view of it counts: saving a view of x saves x, not a copy)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _probe_sigmoid(cls: object, inputs: dict) -> dict:
    """Run Sigmoid on a float64 vector and a float32 matrix, both graphs alive at once, then
    backward each (the second first): values, gradients, and what each node saved."""
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise AnswerError("`Sigmoid` should be a subclass of torch.autograd.Function")
    xs, ys = [], []
    for case in inputs["cases"]:
        x = tensor_of(case, case["x"]).requires_grad_()
        y = student(cls.apply, x)
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            raise AnswerError("Sigmoid.apply(x) should return one tensor of x's shape")
        xs.append(x)
        ys.append(y)
    observed = []
    for x, y in zip(xs, ys):
        node = y.grad_fn
        saved = list(node.saved_tensors) if node is not None else []
        on_ctx = sorted(k for k, v in vars(node).items() if isinstance(v, torch.Tensor)) if node is not None else []
        observed.append({
            "y": y.detach().flatten().tolist(), "dtype": dtype_name(y),
            "has_graph": node is not None,
            "saved": [{"output": _same_storage(t, y), "input": _same_storage(t, x), "numel": t.numel()}
                      for t in saved],
            "on_ctx": on_ctx,
        })
    for i in reversed(range(len(xs))):  # the later graph first: nothing may depend on call order
        g = tensor_of(inputs["cases"][i], inputs["cases"][i]["g"])
        if ys[i].grad_fn is not None:
            try:
                student(ys[i].backward, g)
            except AnswerRaised as err:  # the forward's facts still count; the gradient does not
                observed[i]["backward_raised"] = str(err)
        observed[i]["grad"] = None if xs[i].grad is None else xs[i].grad.flatten().tolist()
    return {"cases": observed, "substituted": _substituted(cls, inputs["substitute"])}


def _substituted(cls: type, case: dict) -> list[float] | None:
    """The gradient when what backward reads through ctx.saved_tensors is swapped (by saved-tensor
    hooks) for the same value at another point x2: x becomes x2, σ(x) becomes σ(x2). A backward
    that reads what it saved gives the gradient at x2; one that reads a value kept elsewhere (a list
    on ctx, a global) gives the gradient at x."""
    x = tensor_of(case, case["x"]).requires_grad_()
    x2 = tensor_of(case, case["x2"])
    def pack(t: torch.Tensor) -> torch.Tensor:
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        flat = t.detach().reshape(-1)
        if t.numel() == x.numel() and torch.equal(flat, x.detach().reshape(-1)):
            return x2.reshape(t.shape)
        if t.numel() == x.numel() and torch.allclose(flat, torch.sigmoid(x.detach()).reshape(-1)):
            return torch.sigmoid(x2).reshape(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = student(cls.apply, x)
    if not isinstance(y, torch.Tensor) or y.grad_fn is None:
        return None
    try:
        student(y.backward, tensor_of(case, case["g"]))
    except AnswerRaised:
        return None
    return None if x.grad is None else x.grad.flatten().tolist()


EXERCISE = Exercise(
    "ex01", "Forward values the reverse rules need", LESSON,
    (
        cases_question("q1", 1, "for each binary op and which inputs require grad: the slots its reverse rule "
                       "saves", "q1_slots", Q1_CASES, keyed_by=None, details=(
                     "`a` and `b` are float32 tensors (`a @ b` multiplies a 2×3 by a 3×4 matrix; the others are "
                     "vectors of length 5). For every case `\"op:who\"` below, give the **set** of slot names "
                     "(as PyTorch names them, e.g. `{\"self\"}`) that the op's reverse rule saves. `who` says "
                     "which inputs require grad: " + ", ".join(f"`{k}` = {v}" for k, v in GRADS.items()) +
                     ". An op that saves nothing gets an empty set. Cases: " +
                     ", ".join(f"`{c}`" for c in Q1_CASES) + ". Every case is checked. "
                     f"See {lesson_link(LESSON)}: mul saves `other` only if `self` needs a gradient, and "
                     "vice versa; for the others, think about which values each input's gradient formula uses.")),
        cases_question("q2", 1, "for each unary op y = op(x): which slot its reverse rule saves ('self' or "
                       "'result')", "q2_slots", UNARY, keyed_by=None, details=(
                     "`x` is a float32 vector that requires grad. For each op below give the set of slots its "
                     "reverse rule saves: `{\"self\"}` (the input), `{\"result\"}` (the output), both, or an empty "
                     "set. Ops (all `torch.<op>(x)`, relu is `torch.relu`): " + ", ".join(f"`{u}`" for u in UNARY) +
                     f". Every op is checked. See {lesson_link(LESSON)}: write each derivative in terms of "
                     "x or of y and ask which is cheaper.")),
        Question("q3", 3, "a custom autograd.Function Sigmoid that saves one tensor for backward: the input or "
                 "the output",
                 "Sigmoid", probe=_probe_sigmoid, draw=_draw_sigmoid, kind="code", details=(
                     "Write `class Sigmoid(torch.autograd.Function)` with `forward(ctx, x)` returning σ(x) = "
                     "1/(1+e^(−x)) and `backward(ctx, grad)` returning `grad·σ(x)·(1−σ(x))`. Save exactly one "
                     "tensor with `ctx.save_for_backward`: the input x itself (then recompute σ in backward) or "
                     "the output itself (no recompute) — not a copy, not both, and no tensors stored as ctx "
                     "attributes (nor in a list or dict on ctx): backward must read it back with "
                     "`ctx.saved_tensors`, which the checker verifies by swapping the saved value through "
                     "saved-tensor hooks. The checker runs it on float64 and float32 inputs of several shapes, "
                     "with two graphs alive at once. Both choices score full marks; the check tells you what "
                     "yours costs. "
                     f"See {lesson_link(LESSON)} and lesson 10's “Check yourself”."), stub=SIGMOID_STUB),
    ),
)
