"""ex06 judge: the diagnostic history, the training, and measured memory.

Correct: the diagnostic values after each SGD step (float or a tensor without history:
`.item()`, `float()`, `.detach()`, `.data`, or computing it under no_grad / inference_mode),
the same trained parameters, storages alive after the call ≤ 64 B per step + 256 B (beyond
the gradients), and a peak within 64 B per step + 1 KiB of the reference loop's (measured the
same way, now). Look-right-but-wrong: `val.clone()` (keeps the graph), returning floats while
stashing the tensors elsewhere (alive bytes count, not what the list holds), keeping every
graph and converting at the end (the peak grows), logging before the step (other values).
"""

from __future__ import annotations

import functools
import json

import torch

from ..ex06 import setup
from ..watch import Watch
from .common import close, parts


def reference(inputs: dict) -> tuple[list[float], list[float], int]:
    """The loop done right, measured the same way: history, parameters, peak bytes."""
    return _reference(json.dumps(inputs, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _reference(key: str) -> tuple[list[float], list[float], int]:
    inputs = json.loads(key)
    model, x, x_val = setup(inputs)
    with Watch() as watch:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        history = []
        for _ in range(inputs["steps"]):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            val = model(x_val).pow(2).mean()  # as the notebook's loop: val lives on into the next step
            history.append(val.item())
    params = [v for p in model.parameters() for v in p.detach().flatten().tolist()[:64]]
    return history, params, watch.peak


def judge_q1(obs: dict, inputs: dict) -> tuple[float, str]:
    """Values and training (half), memory alive after and at the peak (half)."""
    history, params, peak = reference(inputs)
    steps = inputs["steps"]
    held, their_peak = obs.get("held"), obs.get("peak")
    held_ok = type(held) is int and held <= 64 * steps + 256
    peak_ok = type(their_peak) is int and their_peak <= peak + 64 * steps + 1024
    return parts(
        (close(obs.get("history"), history, 1e-5),
         "return one value per step: the diagnostic model(x_val).pow(2).mean() after that step's SGD update"),
        (close(obs.get("params"), params, 1e-5), "train the same way: SGD(lr=0.1) on model(x).pow(2).mean()"),
        (held_ok, "memory your call created is still alive after it returns, growing with the steps: something "
                  "still holds each step's diagnostic graph (a list, a global, a clone)"),
        (peak_ok, "the most memory alive at once grows with the steps: drop each diagnostic's graph in the "
                  "step that made it, not at the end"),
    )


JUDGES = {"q1": judge_q1}
