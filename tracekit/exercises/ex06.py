"""ex06 · Graphs kept alive by application references (probe side: no truth here)."""

from __future__ import annotations

import numbers
import random

import torch

from .base import AnswerError, Exercise, Question, expect_function, lesson_link, student

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


# the measured run: many steps on a large validation batch, so that one kept graph per step (about 15 MiB
# each here) adds up to far more than anything else a notebook's run can change
GRADE_SIZE = {"steps": 24, "width": 64, "val_batch": 65536}
SELF_SIZE = {"steps": 12, "width": 64, "val_batch": 8192}


def _draw(rng: random.Random) -> dict:
    seed = rng.randint(0, 10**6)
    return {"seed": seed, "steps": rng.randint(4, 8), "width": rng.choice([32, 48, 64]),
            "val_batch": rng.choice([128, 192, 256]),
            "measure": {"grade": {"seed": seed + 1, **GRADE_SIZE}, "self": {"seed": seed + 2, **SELF_SIZE}}}


def _number(value: object, step: int) -> float:
    if isinstance(value, torch.Tensor):
        if value.grad_fn is not None or value.requires_grad:
            raise AnswerError(f"entry {step} of the history is a tensor with history (it keeps its step's graph "
                              "alive): return a Python float or a tensor without history (`.item()`, `.detach()`)")
        if value.numel() == 1:
            return float(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise AnswerError(f"each history entry should be a number (or a one-element tensor), got {type(value).__name__}")


def _run(train: object, inputs: dict) -> dict:
    """train on the drawn model: its history (as numbers) and the trained parameters' first values."""
    expect_function(train, "train(model, x, x_val, steps)")
    model, x, x_val = setup(inputs)
    history = student(train, model, x, x_val, inputs["steps"])
    if isinstance(history, torch.Tensor) and history.dim() == 1:
        if history.requires_grad:
            raise AnswerError("train returned a tensor with history (it keeps the steps' graphs alive): return "
                              "Python floats or a tensor without history (`.item()`, `.detach()`)")
        history = history.tolist()  # one number per step, as a tensor without history
    elif getattr(history, "ndim", None) == 1 and callable(getattr(history, "tolist", None)):
        history = history.tolist()  # a 1-D array (NumPy's) of the values
    if not isinstance(history, list | tuple):
        raise AnswerError("train should return a list (or a tuple, or a 1-D array): one diagnostic value per step")
    return {"history": [_number(v, i) for i, v in enumerate(history)],
            "params": [v for p in model.parameters() for v in p.detach().flatten().tolist()[:64]]}


def _probe(train: object, inputs: dict) -> dict:
    return _run(train, inputs)


def measure(train: object, config: dict) -> dict:
    """The measured workload: train for many steps on a large validation batch (the grader reads the
    memory this needed from the kernel, outside the process)."""
    out = _run(train, config)
    return {"history": out["history"][-4:], "steps": len(out["history"]), "params": out["params"][:16]}


EXERCISE = Exercise(
    "ex06", "Stop keeping graphs alive", LESSON,
    (Question("q1", 4, "train(model, x, x_val, steps): the same training and diagnostic history, without "
              "keeping a graph per step", "train", probe=_probe, draw=_draw, kind="code", measure=measure, details=(
                  "The loop in the cell below runs `steps` SGD steps (lr=0.1) on `model(x).pow(2).mean()` and, "
                  "after each step, logs the diagnostic `val = model(x_val).pow(2).mean()` — computed with grad "
                  "enabled and never backwarded, so `history.append(val)` keeps that step's whole graph "
                  "alive. Make it return the same values (a list, tuple or 1-D array of one number per step: a "
                  "Python float, or a tensor without history) and train the model the same way, while the memory "
                  "still alive after "
                  "`train` returns (beyond the gradients) stays at a few bytes per step and the peak does not "
                  "grow with the steps. `.item()`, `.detach()` or computing the diagnostic under "
                  "`torch.no_grad()` all work. The values are checked on a model drawn at check time; the memory "
                  f"on a run of {GRADE_SIZE['steps']} steps with a validation batch of {GRADE_SIZE['val_batch']:,} "
                  "rows, where the grade reads the most memory the whole run needed from the operating system "
                  "(outside your notebook's process) and compares it with the loop done right: one graph kept "
                  "per step costs about 15 MiB there, and the answer passes when the run needs at most 160 MiB more "
                  "than the reference. Keep your notebook's other cells small (they run in the same "
                  "measurement). The self-check measures a smaller run in your kernel. "
                  f"See {lesson_link(LESSON)}."),
              stub=TRAIN.format(diag="val = model(x_val).pow(2).mean()  # a diagnostic, never backwarded\n        "
                                     "history.append(val)  # this keeps every step's diagnostic graph alive: fix it",
                                ret="history")),),
)
