"""ex09 judges: budget categories and Adam state, measured now.

q1: correct = the category tk.budget reports largest at the peak for that setup (every setup
in the family has a winner ahead of the runner-up by ≥ 25 %, tested), spelled as the table
writes it (case and surrounding spaces ignored). Wrong: the category lesson 9's default setup
shows, "activations" or other names the table does not use.
q2: correct = exp_avg + exp_avg_sq (two copies of each parameter, in its dtype) + one step
count per parameter tensor (a 0-dim float32 tensor on torch 2.13), for every drawn model.
Wrong: float32 moments for a float64 model, one step count per model, ignoring biases.
"""

from __future__ import annotations

import functools

import torch

from ...memory_budget import budget
from ..ex09 import build_model, config_setup
from .common import by_table, each_value


@functools.cache
def ranking(config: str) -> tuple[tuple[str, int], ...]:
    """The categories at the peak, largest first, measured now (once per process)."""
    torch.manual_seed(0)
    model, optimizer, batch = config_setup(config)
    at_peak = budget(model, optimizer, batch, torch.nn.functional.cross_entropy).at_peak
    return tuple(sorted(at_peak.items(), key=lambda kv: -kv[1]))


def _largest_entry(config: str, got: object) -> tuple[bool, str]:
    if not isinstance(got, str):
        return False, "give one category name"
    if got.strip().lower() == ranking(config)[0][0]:
        return True, ""
    return False, ("not the largest at the peak: compare parameter bytes (×1 per copy: gradients, Adam's two "
                   "moments) with batch-sized tensors (the input, one saved activation per layer)")


def adam_truth(case: dict) -> int:
    """Bytes of Adam's state after one step on the drawn model."""
    model = build_model(case)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(2, case["sizes"][0], dtype=getattr(torch, case["dtype"]))
    model(x).sum().backward()
    opt.step()
    return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))


def _adam_entry(case: dict, got: object) -> tuple[bool, str]:
    return got == adam_truth(case), ("not Adam's state: two moments per parameter element in the parameter's "
                                     "dtype, and a step count per tensor")


def judge_q2(obs: dict, inputs: dict) -> tuple[float, str]:
    """Every drawn model right."""
    return each_value(obs, inputs, "adam_state_bytes", _adam_entry)


def prepare_q1(inputs: dict) -> None:
    """Each drawn setup's ranking, measured ahead (beside the submission's sandbox)."""
    for config in inputs["cases"]:
        ranking(config)


JUDGES = {"q1": by_table(_largest_entry), "q2": judge_q2}
PREPARE = {"q1": prepare_q1}
