"""tk.budget on a deep model: a mark per reverse rule reads only what a rule can change (gradients,
released saved values), and the budget is the one a full read at every mark gives, on steps that
change holders mid-backward in each way users write them."""

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint

import tracekit as tk
from tracekit.memory_budget import holders, recorder


def deep(layers: int = 8, width: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.GELU())])


def _steps():
    x, y = torch.randn(8, 16), torch.randn(8, 16)

    def plain():
        model = deep()
        return model, torch.optim.Adam(model.parameters()), {"batch": (x, y), "loss_fn": F.mse_loss}

    def retained_twice():
        model = deep()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step():
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward(retain_graph=True)  # the graph kept: nothing released until the second
            loss.backward()
            opt.step()
        return model, opt, {"step": step}

    def optimizer_in_backward():
        model = deep()
        each = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}

        def update(p):
            each[p].step()
            each[p].zero_grad()  # the gradient freed mid-backward, rule by rule

        def step():
            hooks = [p.register_post_accumulate_grad_hook(update) for p in model.parameters()]
            F.mse_loss(model(x), y).backward()
            for h in hooks:
                h.remove()
        return model, torch.optim.SGD(model.parameters(), lr=0.1), {"step": step}

    def accumulated_out_of_place():
        model = deep(4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        kept = []

        def step():
            opt.zero_grad(set_to_none=False)
            for p in model.parameters():  # a gradient another tensor also holds: accumulated out of place
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad
                kept.append(p.grad)
            F.mse_loss(model(x), y).backward()
            opt.step()
            kept.clear()
        return model, opt, {"step": step}

    def checkpointed_and_double():
        model = deep(6)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step():
            opt.zero_grad()
            h = checkpoint.checkpoint(model[:6], x, use_reentrant=False)
            loss = F.mse_loss(model[6:](h), y)
            grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
            (loss + sum((g ** 2).sum() for g in grads)).backward()
            opt.step()
        return model, opt, {"step": step}

    def tied_on_meta():
        with torch.device("meta"):
            model = deep(4)
            model[6].weight = model[0].weight
            batch = (torch.randn(8, 16), torch.randn(8, 16))
        return model, torch.optim.Adam(model.parameters()), {"batch": batch, "loss_fn": F.mse_loss}

    return [plain, retained_twice, optimizer_in_backward, accumulated_out_of_place, checkpointed_and_double,
            tied_on_meta]


def _facts(b: tk.Budget) -> tuple:
    return ([(m.label, m.live, m.position, sorted(m.bytes.items())) for m in b.timeline], b.peak, b.peak_moment,
            sorted(b.own_peaks.items()), b.series, b.live)


@pytest.mark.parametrize("setup", _steps(), ids=lambda f: f.__name__)
def test_a_rules_mark_reads_what_changed_and_the_budget_is_a_full_reads(setup, monkeypatch):
    torch.manual_seed(0)
    model, opt, how = setup()
    read_all, reads = holders.Holders.read_all, []
    monkeypatch.setattr(holders.Holders, "read_all", lambda self, *a: reads.append(1) or read_all(self, *a))
    fast = tk.budget(model, opt, **how)
    monkeypatch.undo()
    marks = [m for m in fast.timeline if not m.label.startswith("peak")]
    phases = [m for m in marks if "backward " not in m.label or m.label.endswith(": after backward")]
    assert len(reads) == len(phases) < len(marks) / 3  # a full read per phase; none per rule
    full_reads = []
    mark = recorder._StepRecorder.mark

    def read_everything(self, label, backward_pass=0, rule=None):
        full_reads.append(label)
        mark(self, label, backward_pass)  # as every mark was read before: in full

    torch.manual_seed(0)
    model, opt, how = setup()
    monkeypatch.setattr(recorder._StepRecorder, "mark", read_everything)
    slow = tk.budget(model, opt, **how)
    assert _facts(fast) == _facts(slow)
    rules = [label for label in full_reads if label.startswith("backward ")]
    assert len(rules) >= 20 and len(fast.timeline) >= len(rules)
    if setup.__name__ == "optimizer_in_backward":  # each gradient freed as soon as its parameter stepped
        assert fast.moment("after forward").bytes["parameters"] > 0
        assert all(m.bytes["gradients"] == 0 for m in fast.timeline)
    if setup.__name__ == "retained_twice":  # the first backward released nothing; the second everything
        first, second = (fast.moment(f"pass {i}/2: after backward") for i in (1, 2))
        assert first.bytes["saved activations"] > 0 == second.bytes["saved activations"]


def test_the_meta_stream_reports_each_free_before_the_next_op_in_order():
    """On meta each storage's end is found before the next op (all live storages checked in one pass):
    two freed between ops come in the order they were made, a storage made again after a free is new."""
    with recorder._MetaStream() as stream:
        stream.mark("start")  # the stream starts at its first mark
        a = torch.ones(4, device="meta")
        b = a * 2  # 16 bytes each
        c = b.exp()
        d = torch.ones(100, device="meta")
        stream.mark("after four")
        del b, d
        e = a + 1  # the two frees come before this op's allocation
        del a, c, e
        stream.mark("end")
    sizes = [nbytes for _, nbytes in stream.events]
    assert sizes == [16, 16, 16, 400, -16, -400, 16, -16, -16, -16]
    keys = [key for key, _ in stream.events]
    assert keys[4:6] == [keys[1], keys[3]] and sorted(keys[7:]) == sorted([keys[0], keys[2], keys[6]])
    assert stream.marks == [("start", 0), ("after four", 4), ("end", 10)]
