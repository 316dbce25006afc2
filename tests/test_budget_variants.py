"""tk.budget under what users run: gradient accumulation, bf16 autocast, zero_grad(set_to_none)
both ways, Adam vs SGD (with and without momentum), BatchNorm buffers, no warm-up."""

import torch
import torch.nn.functional as F
from test_budget import F32, assert_consistent
from test_budget_forms import OUT, RELU, X, Y, mlp, param_bytes

import tracekit as tk

BF16 = 2


def test_gradient_accumulation_over_micro_batches():
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    k = 4
    b = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss, accumulate=k)
    assert_consistent(b)
    p = param_bytes(model)
    for i in range(1, k + 1):
        fwd, bwd = b.moment(f"micro-batch {i}/{k}: after forward"), b.moment(f"micro-batch {i}/{k}: after backward")
        # a quarter of the rows each, and loss / k saves its divisor k, wrapped as an int64 0-dim tensor
        assert fwd.bytes["saved activations"] == (RELU + OUT) // k + 8
        assert bwd.bytes["saved activations"] == 0
        assert bwd.bytes["gradients"] == p  # made by the first backward, accumulated into after
        assert fwd.bytes["gradients"] == (0 if i == 1 else p)
        # the micro-batches are views of the batch: no new memory; the step holds loss / k, a new
        # 4-byte tensor (rebinding `loss` dropped mse_loss's result and its larger storage)
        assert fwd.bytes["application references"] == X.numel() * F32 + Y.numel() * F32 + F32
    one = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss)
    assert max(one.series["saved activations"]) == RELU + OUT == k * (max(b.series["saved activations"]) - 8)
    assert len([m for m in b.timeline if m.label.endswith("after optimizer step")]) == 1


def test_autocast_bf16_saves_low_precision_activations_and_weight_copies():
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    plain = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss)
    auto = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss, autocast=torch.bfloat16)
    assert_consistent(auto)
    # under autocast the first Linear saves its bf16 copy of x (x itself is the caller's), ReLU its
    # bf16 output, the second Linear its bf16 copy of W2ᵀ; mse_loss runs in float32 on a float32
    # copy of the output
    saved = X.numel() * BF16 + RELU // 2 + 64 * 4 * BF16 + OUT
    assert auto.moment("after forward").bytes["saved activations"] == saved == 3840
    assert plain.moment("after forward").bytes["saved activations"] == RELU + OUT == 4352
    # the parameters, their gradients and Adam's state stay float32
    p = param_bytes(model)
    assert auto.moment("end").bytes["parameters"] == p and auto.moment("end").bytes["gradients"] == p
    assert auto.moment("end").bytes["optimizer state"] == 2 * p + 4 * F32


def test_zero_grad_set_to_none_true_and_false():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = param_bytes(model)
    freed = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss, set_to_none=True)
    kept = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss, set_to_none=False)
    for b in (freed, kept):
        assert_consistent(b)
        assert b.moment("start").bytes["gradients"] == b.moment("end").bytes["gradients"] == p
    assert freed.moment("after zero_grad").bytes["gradients"] == freed.moment("after forward").bytes["gradients"] == 0
    assert freed.moment("after zero_grad").live == freed.moment("start").live - p  # the allocator got them back
    assert all(m.bytes["gradients"] == p for m in kept.timeline)  # zeros, held all step
    assert kept.at_peak["gradients"] == p
    assert kept.peak > freed.peak  # the kept zeros are part of kept's peak


def test_adam_keeps_state_sgd_does_not_momentum_does():
    p = param_bytes(mlp())
    n = len(list(mlp().parameters()))
    expected = {
        "adam": 2 * p + n * F32,  # exp_avg, exp_avg_sq and a float32 step per parameter
        "sgd": 0,
        "momentum": p,  # one momentum buffer per parameter
    }
    for name, make in (("adam", lambda ps: torch.optim.Adam(ps)), ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
                       ("momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))):
        model = mlp()
        b = tk.budget(model, make(model.parameters()), (X, Y), loss_fn=F.mse_loss)
        assert_consistent(b)
        assert all(m.bytes["optimizer state"] == expected[name] for m in b.timeline), name


def test_batchnorm_buffers_count_as_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    b = tk.budget(model, torch.optim.SGD(model.parameters(), lr=0.1), (X, Y), loss_fn=F.mse_loss)
    assert_consistent(b)
    p = param_bytes(model)
    buffers = 2 * 64 * F32 + 8  # running_mean, running_var (float32) and num_batches_tracked (int64)
    assert b.moment("start").bytes["parameters"] == p + buffers
    assert b.moment("end").bytes["gradients"] == p  # buffers get no gradient
    assert "of buffers" in b.notes["parameters"]
    # BatchNorm saves its input and its batch mean and inverse std (64 each); ReLU its output
    bn_input, stats = 16 * 64 * F32, 2 * 64 * F32
    assert b.moment("after forward").bytes["saved activations"] == bn_input + stats + RELU + OUT


def test_without_warmup_the_old_gradients_free_is_placed_at_the_next_mark():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    F.mse_loss(model(X), Y).backward()  # gradients from before the measurement
    b = tk.budget(model, opt, (X, Y), loss_fn=F.mse_loss, warmup=False)
    assert_consistent(b)
    p = param_bytes(model)
    assert b.moment("start").bytes["gradients"] == p
    assert b.moment("after zero_grad").bytes["gradients"] == 0
    assert b.moment("after zero_grad").live == b.moment("start").live - p
    assert "placed at the first mark" in b.source
