"""ex06 · Graphs kept alive by application references (probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import AnswerError, Exercise, Question, expect_function, lesson_link, student
from .watch import Watch

LESSON = "06_app_references"
# the training loop of the question: the stub keeps each step's diagnostic graph, answers change `{diag}`
TRAIN = '''def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        {diag}
    return {ret}'''


def setup(inputs: dict) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The drawn model, training batch and validation batch (float32)."""
    gen = torch.Generator().manual_seed(inputs["seed"])
    width = inputs["width"]
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model, torch.randn(32, width, generator=gen), torch.randn(inputs["val_batch"], width, generator=gen)


def _draw(rng: random.Random) -> dict:
    return {"seed": rng.randint(0, 10**6), "steps": rng.randint(4, 8), "width": rng.choice([32, 48, 64]),
            "val_batch": rng.choice([128, 192, 256])}


def _number(value: object) -> float:
    if type(value) in (int, float):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    raise AnswerError(f"each history entry should be a number (or a one-element tensor), got {type(value).__name__}")


def _probe(train: object, inputs: dict) -> dict:
    """Run train under a storage watch: values, final parameters, bytes alive after it returns, peak."""
    expect_function(train, "train(model, x, x_val, steps)")
    model, x, x_val = setup(inputs)
    with Watch() as watch:
        history = student(train, model, x, x_val, inputs["steps"])
    if not isinstance(history, list | tuple):
        raise AnswerError("train should return a list: one diagnostic value per step")
    grads = tuple(p.grad for p in model.parameters() if p.grad is not None)
    held = watch.alive_bytes(grads)
    return {"history": [_number(v) for v in history],
            "with_graph": sum(isinstance(v, torch.Tensor) and v.grad_fn is not None for v in history),
            "params": [v for p in model.parameters() for v in p.detach().flatten().tolist()[:64]],
            "held": held, "peak": watch.peak}


EXERCISE = Exercise(
    "ex06", "Stop keeping graphs alive", LESSON,
    (Question("q1", 4, "train(model, x, x_val, steps): the same training and diagnostic history, without "
              "keeping a graph per step", "train", probe=_probe, draw=_draw, kind="code", details=(
                  "The loop in the cell below runs `steps` SGD steps (lr=0.1) on `model(x).pow(2).mean()` and, "
                  "after each step, logs the diagnostic `val = model(x_val).pow(2).mean()` — computed with grad "
                  "enabled and never backwarded, so `history.append(val)` keeps that step's whole graph "
                  "alive. Make it return the same values (one number per step: a Python float, or a tensor "
                  "without history) and train the model the same way, while the memory still alive after "
                  "`train` returns (beyond the gradients) stays at a few bytes per step and the peak does not "
                  "grow with the steps. `.item()`, `.detach()` or computing the diagnostic under "
                  "`torch.no_grad()` all work. The checker measures the bytes of every storage your call "
                  "creates that is still alive when it returns, and the most alive at once; model width, "
                  f"batch and steps are drawn at check time. See {lesson_link(LESSON)}."),
              stub=TRAIN.format(diag="val = model(x_val).pow(2).mean()  # a diagnostic, never backwarded\n        "
                                     "history.append(val)  # this keeps every step's diagnostic graph alive: fix it",
                                ret="history")),),
)
