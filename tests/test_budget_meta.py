"""tk.budget on the meta device: the same categories predicted without data, for models that do not fit."""

import torch
import torch.nn.functional as F
from test_budget import F32, assert_consistent

import tracekit as tk
from tracekit.memory_budget import ALLOCATED, META_SOURCE

PHASES = ("start", "after zero_grad", "after forward", "after backward", "optimizer step begins",
          "after optimizer step", "end")


def test_meta_predicts_what_cpu_measures_for_the_default_step():
    cpu, meta = tk.budget(device="cpu"), tk.budget(device="meta")
    assert_consistent(meta)
    host_steps = 6 * F32  # Adam keeps its step counters on the host, not on the model's device
    for label in PHASES:
        c, m = cpu.moment(label).bytes, meta.moment(label).bytes
        for cat in ALLOCATED:
            expected = c[cat] - (host_steps if cat == "optimizer state" else 0)
            assert m[cat] == expected, (label, cat)
    assert meta.peak_moment == cpu.peak_moment  # the peak is predicted at the same reverse rule
    assert meta.peak == cpu.peak - host_steps
    assert meta.source == META_SOURCE and "predicted" in meta.text().splitlines()[0]


def test_meta_budget_of_a_model_that_does_not_fit():
    width, batch, classes = 32768, 64, 1000
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, classes))
        data = (torch.randn(batch, width), torch.randint(0, classes, (batch,)))
    params = (width * width + width + width * classes + classes) * F32
    b = tk.budget(model, torch.optim.AdamW(model.parameters()), data, F.cross_entropy)
    assert_consistent(b)
    assert params > 4 * 2**30  # 4.1 GiB of parameters, 24.5 GiB at the peak
    assert b.moment("start").bytes["parameters"] == params
    assert b.moment("end").bytes["gradients"] == params
    assert b.moment("end").bytes["optimizer state"] == 2 * params  # exp_avg, exp_avg_sq (steps on the host)
    # GELU's input and output (the next Linear's input), log_softmax's output, nll's total_weight
    assert b.moment("after forward").bytes["saved activations"] == 2 * batch * width * F32 + batch * classes * F32 \
        + F32
    assert b.peak_moment == "peak, in the optimizer step"
