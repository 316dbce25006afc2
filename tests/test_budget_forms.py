"""tk.budget on the shapes real training code has: a tensor, (inputs, targets), a dict, a model that
returns its own loss, a user step(); and clear errors for what it cannot run."""

import pytest
import torch
import torch.nn.functional as F
from test_budget import F32, assert_consistent

import tracekit as tk
from tracekit.memory_budget import FORMS, BudgetInputError

torch.manual_seed(0)
X, Y = torch.randn(16, 32), torch.randn(16, 4)
BATCH = X.numel() * F32 + Y.numel() * F32
RELU = 16 * 64 * F32  # the ReLU output the second Linear and ReLU's own rule save
OUT = 16 * 4 * F32  # the model's output, saved by mse_loss


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def param_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def mse_loss_storage() -> int:
    """mse_loss's 0-dim loss keeps its element-wise buffer's storage (256 bytes here, torch 2.13)."""
    return F.mse_loss(mlp()(X), Y).untyped_storage().nbytes()


def test_supervised_pair_with_sgd():
    """The issue's example: batch=(inputs, targets), loss_fn(output, target), an optimizer with no state."""
    model = mlp()
    b = tk.budget(model, torch.optim.SGD(model.parameters(), lr=0.1), (X, Y), loss_fn=F.mse_loss)
    assert_consistent(b)
    p = param_bytes(model)
    start, fwd, end = b.moment("start"), b.moment("after forward"), b.moment("end")
    assert start.bytes["parameters"] == p == 9488
    assert start.bytes["application references"] == BATCH
    assert all(m.bytes["optimizer state"] == 0 for m in b.timeline)
    # x and y are saved too (by the first Linear and by mse_loss) but the caller holds them
    assert fwd.bytes["saved activations"] == RELU + OUT
    assert fwd.bytes["application references"] == BATCH + mse_loss_storage()
    assert end.bytes["gradients"] == p and end.bytes["saved activations"] == 0
    assert b.moment("after optimizer step").live == end.live + mse_loss_storage()  # the step still held the loss


def test_list_and_one_tuple_and_tensor_batches():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    as_list = tk.budget(model, opt, [X, Y], loss_fn=F.mse_loss)
    assert_consistent(as_list)
    assert as_list.moment("after forward").bytes["saved activations"] == RELU + OUT
    for batch in (X, (X,)):
        b = tk.budget(model, opt, batch, loss_fn=lambda out: out.pow(2).mean())  # pow saves its input
        assert_consistent(b)
        assert b.moment("start").bytes["application references"] == X.numel() * F32
        assert b.moment("after forward").bytes["saved activations"] == RELU + OUT
    stand_in = tk.budget(model, opt, X)  # no targets, no loss_fn: mean of the squared output
    assert stand_in.moment("after forward").bytes["saved activations"] == RELU + OUT


class Masked(torch.nn.Module):
    """A model fed keyword arguments, as a DataLoader of dicts yields them."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(32, 4)

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.lin(inputs * mask)


def test_dict_batch_with_a_loss_fn_takes_the_target_key():
    model = Masked()
    batch = {"inputs": X, "mask": torch.ones(16, 32), "labels": Y}
    b = tk.budget(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, loss_fn=F.mse_loss)
    assert_consistent(b)
    assert b.moment("start").bytes["application references"] == 2 * X.numel() * F32 + Y.numel() * F32
    # the Linear saves inputs * mask (its weight needs a gradient); mse_loss saves the output
    assert b.moment("after forward").bytes["saved activations"] == X.numel() * F32 + OUT
    assert b.moment("end").bytes["gradients"] == param_bytes(model)


class OwnLoss(torch.nn.Module):
    """Computes its loss from `labels` and returns a dict, as Hugging Face models do."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(32, 4)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.lin(inputs)
        return {"loss": F.mse_loss(logits, labels), "logits": logits}


def test_dict_batch_without_loss_fn_uses_the_models_own_loss():
    model = OwnLoss()
    b = tk.budget(model, torch.optim.Adam(model.parameters()), {"inputs": X, "labels": Y})
    assert_consistent(b)
    p = param_bytes(model)
    # the logits are dropped with the output dict: only mse_loss's saved reference keeps them
    assert b.moment("after forward").bytes["saved activations"] == OUT
    assert b.moment("end").bytes["optimizer state"] == 2 * p + 2 * F32


def test_user_step_finds_the_phases_and_what_the_caller_holds():
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    losses = []

    def step():
        opt.zero_grad()
        out = model(X)  # a variable of the step: held by the caller, not only by the graph
        loss = F.mse_loss(out, Y)
        torch.autograd.backward(loss)
        opt.step()
        losses.append(loss)  # the leak of lesson 6: the loss (and its storage) outlives the step

    b = tk.budget(model, opt, step=step)
    assert_consistent(b)
    labels = [m.label for m in b.timeline]
    for phase in ("start", "after zero_grad", "after forward", "after backward", "optimizer step begins",
                  "after optimizer step", "end"):
        assert phase in labels
    assert labels.index("after forward") < labels.index("backward 1: MseLossBackward0") < labels.index("after backward")
    fwd = b.moment("after forward")
    assert fwd.bytes["saved activations"] == RELU  # out is the step's variable
    grown = b.moment("end").bytes["application references"] - b.moment("start").bytes["application references"]
    assert grown == mse_loss_storage()  # one more kept loss each step
    assert fwd.bytes["application references"] == b.moment("start").bytes["application references"] + OUT + \
        mse_loss_storage()


def test_user_step_with_retain_graph_keeps_the_saved_activations_until_the_caller_lets_go():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(X), Y)
        loss.backward(retain_graph=True)
        opt.step()

    b = tk.budget(model, opt, step=step)
    assert_consistent(b)
    assert b.moment("after backward").bytes["saved activations"] == RELU + OUT  # the graph was kept
    assert b.moment("end").bytes["saved activations"] == 0  # gone with the step's loss


@pytest.mark.parametrize("call, message", [
    (lambda m, o: tk.budget(m, o, (X, Y, Y), loss_fn=F.mse_loss), "tuple of 3 items"),
    (lambda m, o: tk.budget(m, o, "data"), "batch is a str"),
    (lambda m, o: tk.budget(m, o, {1: X}), "non-string keys"),
    (lambda m, o: tk.budget(m, o, (X, Y)), "batch has targets but no loss_fn"),
    (lambda m, o: tk.budget(m, o, (X, Y), loss_fn=lambda out: out.sum()), "loss_fn takes one argument"),
    (lambda m, o: tk.budget(m, o, X, loss_fn=F.mse_loss), "the batch has no targets"),
    (lambda m, o: tk.budget(m, o, (X, Y), loss_fn=lambda out, y: out - y), "a tensor of shape (16, 4)"),
    (lambda m, o: tk.budget(m, o, step=lambda: m(X).sum()), "ran no backward pass"),
    (lambda m, o: tk.budget(m, o, step=lambda: None, loss_fn=F.mse_loss), "leave loss_fn"),
    (lambda m, o: tk.budget(m, None, (X, Y), loss_fn=F.mse_loss), "optimizer is a NoneType"),
    (lambda m, o: tk.budget(lambda x: x, o, X), "model is a function"),
    (lambda m, o: tk.budget(m, o, (X, Y), loss_fn=F.mse_loss, accumulate=0), "accumulate must be"),
    (lambda m, o: tk.budget(m, o, (X, Y), loss_fn=F.mse_loss, accumulate=32), "at least 32 samples"),
    (lambda m, o: tk.budget(m, o, (X, Y), loss_fn=F.mse_loss, device="meta"), "device"),
])
def test_what_it_cannot_run_is_a_clear_error(call, message):
    model = mlp()
    with pytest.raises(tk.TracekitError) as err:
        call(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert message in str(err.value)


def test_batch_errors_name_the_accepted_forms():
    model = mlp()
    with pytest.raises(BudgetInputError) as err:
        tk.budget(model, torch.optim.SGD(model.parameters(), lr=0.1), 3.0)
    assert str(err.value).endswith(FORMS)
    for form in ("batch=tensor", "batch=(inputs, targets)", "batch=dict", "step=callable"):
        assert form in FORMS


def test_reading_the_callers_variables_never_extends_a_lifetime():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        batch = {"x": torch.randn(16, 32), "y": torch.randn(16, 4)}  # made inside the step
        loss = F.mse_loss(model(batch["x"]), batch["y"])
        loss.backward()
        del batch  # the caller lets go of its inputs before the optimizer step
        opt.step()

    b = tk.budget(model, opt, step=step)
    assert_consistent(b)
    assert b.moment("after backward").bytes["application references"] == BATCH + mse_loss_storage()
    begins = b.moment("optimizer step begins")
    assert begins.bytes["application references"] == mse_loss_storage()  # only the loss is left
    assert begins.live == b.moment("after backward").live - BATCH  # the allocator got the batch back


def test_memory_with_no_known_holder_is_shown_unattributed():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        out = model(X)
        model.last_output = out.detach()  # a plain attribute: not a parameter, buffer or variable
        F.mse_loss(out, Y).backward()
        opt.step()

    b = tk.budget(model, opt, step=step)
    assert_consistent(b)
    # the warm-up step's copy is there at the start and freed when this step replaces it (the
    # measured stream shows the free, so it was live before); the new copy outlives the step
    for label in ("start", "after zero_grad", "end"):
        assert b.moment(label).bytes["unattributed"] == OUT, label
    assert b.moment("end").live == b.moment("start").live
    # while the step runs, its variable `out` shares that storage: the caller's code holds it
    assert b.moment("after backward").bytes["unattributed"] == 0
