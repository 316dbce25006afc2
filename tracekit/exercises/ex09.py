"""ex09 · A memory budget for a training step (probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import (
    AnswerError,
    Exercise,
    Question,
    cases_question,
    lesson_link,
    md_table,
    number_value,
    student,
    values_probe,
)

LESSON = "09_budget"
# id -> (in features, hidden width, hidden layers, batch, optimizer); classifier into 10 classes
CONFIGS = {
    "C1": (512, 512, 2, 16, "Adam"),
    "C2": (64, 64, 4, 4096, "SGD"),
    "C3": (128, 128, 6, 2048, "Adam"),
    "C4": (1024, 16, 2, 4096, "SGD"),
    "C5": (64, 256, 8, 1024, "SGD"),
    "C6": (2048, 8, 1, 2048, "Adam"),
}


def config_setup(config: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, tuple[torch.Tensor, torch.Tensor]]:
    """The model, optimizer and batch of a configuration (as the prompt's table describes them)."""
    n_in, width, depth, batch, opt = CONFIGS[config]
    layers: list[torch.nn.Module] = [torch.nn.Linear(n_in, width), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    optimizer = torch.optim.Adam(model.parameters()) if opt == "Adam" else torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, (torch.randn(batch, n_in), torch.randint(0, 10, (batch,)))


def _draw_models(rng: random.Random) -> dict:
    cases = []  # every draw has each dtype with and without bias: no answer passes by a lucky draw
    for dtype in ("float32", "float64"):
        for bias in (True, False):
            cases.append({"sizes": [rng.randint(2, 64) for _ in range(rng.randint(2, 4))], "bias": bias,
                          "dtype": dtype})
    return {"cases": cases}


def build_model(case: dict) -> torch.nn.Module:
    """A drawn stack of Linear layers."""
    sizes = case["sizes"]
    layers = [torch.nn.Linear(a, b, bias=case["bias"]) for a, b in zip(sizes, sizes[1:])]
    return torch.nn.Sequential(*layers).to(getattr(torch, case["dtype"]))


def _int(got: object) -> int:
    """A whole number of any standard kind (int, numpy integer, a one-element tensor) as an int."""
    if isinstance(got, torch.Tensor) and got.numel() == 1 and not got.dtype.is_floating_point:
        got = got.reshape(()).item()
    number = number_value(got)
    if type(number) is float and number.is_integer():
        number = int(number)
    if type(number) is not int:
        raise AnswerError(f"adam_state_bytes should return a whole number of bytes, got {type(got).__name__}")
    return number


_probe = values_probe("adam_state_bytes(model)", lambda fn, case: student(fn, build_model(case)), _int)


EXERCISE = Exercise(
    "ex09", "Budget a training step", LESSON,
    (
        cases_question("q1", 2, "for each training setup: which budget category is largest at the peak of a step",
                       "q1_largest", CONFIGS, keyed_by="setup", see=f"See {lesson_link(LESSON)}.", details=(
                     "Each setup is a float32 classifier `Linear(in, width), ReLU` followed by `layers − 1` "
                     "more `Linear(width, width), ReLU` and a final `Linear(width, 10)`, trained one step on a "
                     "batch of random inputs with cross-entropy; Adam with its defaults, or SGD(lr=0.1) without "
                     "momentum:\n\n" + md_table(["id", "in", "width", "layers", "batch", "optimizer"],
                                                  [(f"`{k}`", *config) for k, config in CONFIGS.items()]) +
                     "\n\nFor each, name the category of `tk.budget(model, optimizer, (x, y), "
                     "torch.nn.functional.cross_entropy)` with the most bytes at the peak, exactly as the "
                     "budget table writes it (`parameters`, `gradients`, `optimizer state`, `saved activations`, "
                     "`application references`, `temporary workspaces`). Estimate from sizes (parameters × 4 B, "
                     "batch × width × 4 B per saved activation; the input batch `x` you hold yourself counts as "
                     "`application references`, even though the first layer also saves it); you may check one "
                     "with tk.budget.")),
        Question("q2", 2, "adam_state_bytes(model): bytes of Adam's state after its first step",
                 "adam_state_bytes", probe=_probe, draw=_draw_models, kind="code", details=(
                     "`model` is a stack of `torch.nn.Linear` layers (with or without bias) in float32 or "
                     "float64. Return, as an int, the bytes of every tensor in `torch.optim.Adam(model."
                     "parameters()).state` after one `step()` with default options (PyTorch keeps each parameter's "
                     "`step` count as a one-element float32 tensor, whatever the parameter's dtype). Work it out "
                     "from the "
                     "model's parameters (what Adam keeps per parameter); running Adam on a copy and counting "
                     "also gives the number, and the checker cannot tell the two apart, so it does not try. "
                     "Each check calls it on four drawn models: float32 and float64, each with and without bias. "
                     f"See {lesson_link(LESSON)}: what Adam keeps per parameter, and per tensor."),
                 stub="def adam_state_bytes(model):\n    raise NotImplementedError"),
    ),
)
