"""ex06 judge: the diagnostic history, the training, and memory measured outside the answer.

Correct: the diagnostic values after each SGD step (a float or a tensor without history:
`.item()`, `float()`, `.detach()`, `.data`, or computing it under no_grad / inference_mode),
the same trained parameters, and — on a 24-step run with a 65,536-row validation batch, in a
sandbox of its own — a memory high-water mark (the kernel's, of the whole sandbox) at most
160 MiB above the reference loop's measured the same way (run to run the reference varies by
under 1 MiB; an honest answer written another way measured up to +96 MiB once). One graph kept
per step costs about 15 MiB there (about 360 MiB in all), so every way of keeping graphs fails:
`val.clone()`,
returning floats while stashing the tensors elsewhere (a global, a closure, a child process),
keeping every graph and converting at the end. All or nothing: a blank (the buggy loop) scores 0.
"""

from __future__ import annotations

import functools
import json

import torch

from ..ex06 import TRAIN, setup
from ..watch import Watch
from .common import close

GRADE_SLACK = 160 << 20  # kernel bytes above the reference run (one kept graph per step: ~15 MiB, 24 steps)
SELF_SLACK = 8 << 20  # storage bytes above the reference in the self-check (one kept graph: 2 MiB, 12 steps)
REFERENCE = TRAIN.format(diag="val = model(x_val).pow(2).mean()\n        history.append(val.item())", ret="history")


def reference_cells(question: str) -> list[str]:
    """The code cells of a reference notebook for the measured question (its baseline memory)."""
    return ["import torch\nimport tracekit as tk", REFERENCE]


# what the measured run sends back: the last MEASURED_LAST diagnostics (its truth computes only those: the
# diagnostic never changes the training, and on the big validation batch it is most of the loop's work)
MEASURED_LAST = 4
_LAST_ONLY = TRAIN.format(diag=f"history.append(model(x_val).pow(2).mean().item() if len(history) >= steps - "
                               f"{MEASURED_LAST} else None)", ret="history")


def _reference_train(text: str = REFERENCE):  # noqa: ANN202 - the reference `train`
    namespace: dict = {"torch": torch}
    exec(text, namespace)  # noqa: S102 - our own reference text
    return namespace["train"]


@functools.lru_cache(maxsize=128)
def _reference(key: str, text: str) -> tuple[list[float], list[float]]:
    inputs = json.loads(key)
    model, x, x_val = setup(inputs)
    history = _reference_train(text)(model, x, x_val, inputs["steps"])
    return history, [v for p in model.parameters() for v in p.detach().flatten().tolist()[:64]]


def _key(inputs: dict) -> str:
    return json.dumps({k: inputs[k] for k in ("seed", "steps", "width", "val_batch")}, sort_keys=True)


def reference(inputs: dict) -> tuple[list[float], list[float]]:
    """The loop done right on these inputs: its history and trained parameters (first 64 values)."""
    return _reference(_key(inputs), REFERENCE)


def measured_reference(config: dict) -> tuple[list[float], list[float]]:
    """The loop done right on the measured run's config: its last diagnostics and first 16 trained values."""
    history, params = _reference(_key(config), _LAST_ONLY)
    return history[-MEASURED_LAST:], params[:16]


@functools.lru_cache(maxsize=16)
def reference_watch_peak(question: str, config: str) -> int:
    """The self-check's baseline: the most storage bytes alive at once in the reference's workload."""
    inputs = json.loads(config)
    model, x, x_val = setup(inputs)
    train = _reference_train()
    with Watch() as watch:
        train(model, x, x_val, inputs["steps"])
    return watch.peak


def judge_q1(obs: dict, inputs: dict) -> tuple[float, str]:
    """Values and training on the drawn model, then the measured run's values and memory: all needed."""
    history, params = reference(inputs)
    if not close(obs.get("history"), history, 1e-5):
        return 0.0, "return one value per step: the diagnostic model(x_val).pow(2).mean() after that step's SGD update"
    if not close(obs.get("params"), params, 1e-5):
        return 0.0, "train the same way: SGD(lr=0.1) on model(x).pow(2).mean()"
    measured = obs.get("measured") or {}
    values = (measured.get("values") or {}).get("values")
    how = measured.get("how")
    config = inputs["measure"]["self" if how == "watch" else "grade"]
    if not isinstance(values, dict):
        why = (measured.get("values") or {}).get("error") or "it did not finish"
        return 0.0, f"the measured run (a {config['steps']}-step run on a larger batch) did not give its values: {why}"
    ref_history, ref_params = measured_reference(config)
    if not (values.get("steps") == config["steps"] and close(values.get("history"), ref_history, 1e-4)
            and close(values.get("params"), ref_params, 1e-4)):
        return 0.0, "on the measured run (more steps, a larger batch) the history or the training differs"
    peak, base = measured.get("peak_bytes"), measured.get("reference_peak")
    if type(peak) is not int or type(base) is not int:
        return 0.0, "the memory of the measured run could not be read: not graded (please report this)"
    slack = SELF_SLACK if how == "watch" else GRADE_SLACK
    extra = peak - base
    if extra > slack:
        per_step = max(0, extra) / config["steps"] / 2**20
        return 0.0, (f"the measured run needed {extra / 2**20:.0f} MiB more than the loop done right (about "
                     f"{per_step:.1f} MiB per step): something still holds each step's diagnostic graph (the list, "
                     "a global, a clone); drop each graph in the step that made it")
    return 1.0, "correct"


def prepare_q1(inputs: dict) -> None:
    """The truth judge_q1 needs, computed ahead (the grader runs it beside the submission's sandbox)."""
    reference(inputs)
    measured_reference(inputs["measure"]["grade"])


JUDGES = {"q1": judge_q1}
PREPARE = {"q1": prepare_q1}
