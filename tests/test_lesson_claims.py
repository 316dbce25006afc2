"""Each lesson's key claims, checked against the runtime: the mechanism, not the wording.

One test per lesson. A lesson's committed outputs are compared by nbval; these tests check that
what the prose says is how torch works (on the sizes that make the point, not the lesson's)."""

import contextlib
from functools import partial

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import tracekit as tk
from tracekit.scenarios import exp_times, shared_views


def _slots(t: torch.Tensor) -> list[str]:
    return [f"{r.node.op}.{r.slot}" for r in tk.trace(t).residuals]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _alive(node, attr: str) -> bool:
    try:
        getattr(node, attr)
    except RuntimeError:
        return False
    return True


def test_01_forward_values_what_each_rule_keeps_and_lines_are_not_nodes_kernels_or_allocations():
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    c = torch.randn(3)
    assert _slots(a * b) == ["mul.self", "mul.other"]
    assert _slots(a * c) == ["mul.other"]  # only what a wanted gradient needs
    assert _slots(c * a) == ["mul.self"]
    assert _slots(a.exp()) == ["exp.result"] and _slots(torch.sigmoid(a)) == ["sigmoid.result"]
    hand = tk.trace((1 / (1 + torch.exp(-a))).sum())
    assert [(r.node.op, r.slot, r.dtype) for r in hand.residuals] == [
        ("exp", "result", "float32"), ("reciprocal", "result", "float32"), ("mul", "other", "int64")]
    W, inp = torch.randn(4, 3, requires_grad=True), torch.randn(2, 3)
    with tk.capture() as cap, tk.count_ops() as ops:
        out = torch.nn.functional.linear(inp, W)
    assert [n.name for n in cap.trace(out).nodes] == ["TBackward0", "MmBackward0"]  # two nodes ...
    assert dict(ops) == {"t": 1, "mm": 1} and ops.computing() == {"mm": 1}  # ... one computing kernel
    with tk.count_ops() as ops:
        (1 / (1 + torch.exp(-a))).sum()
    assert list(ops.computing()) == ["neg", "exp", "add", "reciprocal", "mul", "sum"]
    with tk.count_ops() as ops:
        torch.sigmoid(a).sum()
    assert ops.computing() == {"sigmoid": 1, "sum": 1}
    with tk.measure("cpu") as probe:
        out = torch.nn.functional.linear(inp, W)
        probe.mark("linear")
        out.mul_(2)
        probe.mark("mul_")
    assert probe.result.marks["linear"] == out.nbytes  # one allocation: the transpose is a view
    assert probe.result.marks["mul_"] - probe.result.marks["linear"] == 8  # the number 2 as an int64 tensor
    assert out.grad_fn._saved_other.dtype == torch.int64


@pytest.mark.parametrize("sin_first", [True, False])
def test_02_small_trace_among_ready_rules_the_one_created_last_runs_first(sin_first):
    x = torch.tensor(1.0, requires_grad=True)
    with tk.capture() as cap:
        s, e = (x.sin(), x.exp()) if sin_first else reversed((x.exp(), x.sin()))
        out = s + e
    numbers = {f.name(): f._sequence_nr() for f, _ in out.grad_fn.next_functions}
    tr = cap.trace(out)
    tr.backward()
    order = [step.node.name for step in tr.steps]
    assert order[0] == "AddBackward0"
    assert order[1:] == sorted(numbers, key=numbers.get, reverse=True)  # highest sequence number first
    assert order[1] == ("ExpBackward0" if sin_first else "SinBackward0")
    w, xn = torch.tensor(2.0, requires_grad=True), torch.tensor(1.0, requires_grad=True)
    with tk.capture() as cap:
        y = torch.sigmoid(w * xn - 0.5)
    tr = cap.trace(y)
    tr.backward()
    assert [s.node.name for s in tr.steps] == ["SigmoidBackward0", "SubBackward0", "MulBackward0"]
    assert [[r.slot for r in s.used] for s in tr.steps] == [["result"], [], ["self", "other"]]
    assert tr.nodes[0].source.startswith("test_lesson_claims.py:")  # a file keeps file.py:line


def test_03_storage_identity_is_not_storage_and_views_share_one_allocation():
    a = torch.randn(4, requires_grad=True)
    e, s = a.exp(), a.sin()
    assert e.grad_fn._saved_result is not e.grad_fn._saved_result  # own output: a new object per read
    assert _same_storage(e.grad_fn._saved_result, e)
    assert s.grad_fn._saved_self is a  # a saved input, without hooks: the same object
    h = a * 2
    assert h.sin().grad_fn._saved_self is h  # a non-leaf input too
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        hooked = a.sin()
    first, second = hooked.grad_fn._saved_self, hooked.grad_fn._saved_self
    assert first is not a and first is not second and _same_storage(first, a)  # under a hook: neither
    w, big = torch.ones(5, requires_grad=True), torch.randn(1024, 1024)
    r = tk.trace((big[0, :5] * w).sum()).residuals[0]
    assert (r.nbytes, r.pinned_nbytes) == (20, 4 * 1024 * 1024)
    a = torch.randn(4096, requires_grad=True)
    with tk.measure("cpu") as probe:
        z = shared_views(a)
        probe.mark("after forward")
    tr = tk.trace(z)
    views = [r for r in tr.residuals if r.storage is not None and r.storage.nbytes == a.nbytes]
    assert len(views) == 4 and len({r.storage.key for r in views}) == 1
    assert tr.visible_bytes > tr.saved_bytes  # the naive sum counts the one allocation twice
    assert abs(probe.result.marks["after forward"] - (tr.saved_bytes + z.nbytes)) <= 16  # measured: storages


def test_04_retention_released_not_freed_second_pass_starts_and_create_graph_shares_one_node():
    a = torch.linspace(-1, 1, 64, requires_grad=True)
    with tk.capture() as cap:
        y = exp_times(a)
    tr = cap.trace(y)
    tr.backward()
    other = next(r for r in tr.residuals if r.slot == "other")  # mul's saved a: released, not freed
    assert other.released_at == 1 and other.freed_at is None
    started = []
    node = y.grad_fn
    while node is not None:
        name = node.name()
        node.register_prehook(lambda grad, name=name: started.append(name))
        node = node.next_functions[0][0] if node.next_functions else None
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    assert started == ["SumBackward0", "MulBackward0"]  # the first rule runs; mul's is the first to miss
    x = torch.linspace(-2, 2, 64, requires_grad=True)
    s = x.sin()
    p = s * x
    y = p.sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    torch.autograd.grad(g.sum(), x)
    assert not _alive(s.grad_fn, "_saved_self")  # the node g's graph runs through: released
    assert _alive(p.grad_fn, "_saved_self") and _alive(p.grad_fn, "_saved_other")  # mul's: kept
    assert [str(r.status) for r in tk.trace(y).residuals] == ["released", "live", "live"]
    with pytest.raises(RuntimeError):
        torch.autograd.grad(y, x)
    (g2,) = torch.autograd.grad((x.sin() * x).sum(), x, retain_graph=True)
    assert not g2.requires_grad  # retaining is not recording a graph of the derivative


def test_05_inplace_the_counter_belongs_to_a_tensor_and_its_views_not_to_its_memory():
    a = torch.linspace(-1, 1, 8, requires_grad=True)
    truth = 2 * torch.cos(2 * a.detach())

    def after(write) -> tuple[int, bool, torch.Tensor | None]:
        a.grad = None
        h = a * 2
        y = h.sin()
        write(h)
        try:
            y.sum().backward()
        except RuntimeError:
            return h._version, False, None
        return h._version, True, a.grad.clone()

    def under_no_grad(t):
        with torch.no_grad():
            t.add_(0)

    for seen in (lambda t: t[:2].add_(0), lambda t: t.detach().add_(0), under_no_grad,
                 lambda t: (t.mul_(2), t.div_(2))):
        version, ran, _ = after(seen)
        assert version >= 1 and not ran  # counted (a write of the same values too) and refused
    for unseen in (lambda t: t.data.fill_(0), lambda t: t.detach().numpy().fill(0),
                   lambda t: torch.empty(0).set_(t.untyped_storage(), 0, t.shape).fill_(0)):
        version, ran, grad = after(unseen)
        assert version == 0 and ran  # not counted, nothing refuses ...
        assert torch.equal(grad, torch.full_like(a, 2.0)) and not torch.allclose(grad, truth)  # ... and wrong


def test_06_app_references_a_closure_keeps_the_graph_and_inference_tensors_cannot_be_saved():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(64, 256)
    kept = {}
    for name, keep in {"val": lambda v: v, "closure": lambda v: (lambda: v.item()), "item": lambda v: v.item()}.items():
        history = []
        with tk.measure("cpu") as probe:
            for i in range(3):
                history.append(keep(torch.tanh(x @ w).pow(2).mean()))
                probe.mark(f"{i}")
        kept[name] = probe.result.marks["2"] - probe.result.marks["0"]
        del history
    assert kept["closure"] == kept["val"] >= 2 * 64 * 256 * 4 and kept["item"] == 0
    with torch.inference_mode():
        scale = (x @ w).pow(2).mean()
    assert scale.is_inference()
    with pytest.raises(RuntimeError, match="do not track version counter"):
        _ = scale._version
    (torch.tanh(x @ w).mean() + scale).backward()  # it may enter a graph where no rule saves it
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (torch.tanh(x @ w).mean() * scale).backward()


def _mlp(block, x, ws, every=0, policy=None):
    def segment(h, *chunk):
        for w in chunk:
            h = block(h, w)
        return h

    if not every:
        return segment(x, *ws).pow(2).mean()
    h = x
    for i in range(0, len(ws), every):
        ctx = partial(create_selective_checkpoint_contexts, policy) if policy else None
        kwargs = {"context_fn": ctx} if ctx else {}
        h = checkpoint(segment, h, *ws[i:i + every], use_reentrant=False, **kwargs)
    return h.pow(2).mean()


def _tanh_block(h, w):
    return torch.tanh(h @ w)


def test_07_hooks_every_save_is_handed_and_save_on_cpu_copies_all_of_them():
    x = torch.randn(64, 64)
    ws = [(torch.randn(64, 64) / 8).requires_grad_() for _ in range(8)]
    handed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: handed.append(t) or t, lambda t: t):
        loss = _mlp(_tanh_block, x, ws)
    one = x.nbytes
    assert len(handed) == 24 and sum(t.is_leaf for t in handed) == 8  # x and 7 weights among the saves
    saves = sum(t.nbytes for t in handed)
    handed.clear()
    del loss
    memory = {}
    for name, hooks in {"plain": contextlib.nullcontext, "soc": torch.autograd.graph.save_on_cpu,
                        "soc pin": partial(torch.autograd.graph.save_on_cpu, pin_memory=True)}.items():
        with tk.measure("cpu") as probe:
            with hooks():
                loss = _mlp(_tanh_block, x, ws)
            probe.mark("after forward")
            grads = torch.autograd.grad(loss, ws)
        memory[name] = (probe.result.marks["after forward"], grads)
    plain = memory["plain"][0]
    assert abs(plain - 8 * one) <= 64  # the activations: eight tanh outputs
    assert abs(memory["soc"][0] - plain) <= 64  # save_on_cpu() of CPU tensors moves nothing
    assert abs(memory["soc pin"][0] - saves) <= 64 and round(memory["soc pin"][0] / plain) == 3  # every save
    assert all(torch.equal(g, p) for name in memory for g, p in zip(memory[name][1], memory["plain"][1]))


@pytest.mark.slow  # ~13 s: the fast tests stay under a minute
def test_08_recompute_counts_the_work_each_schedule_redoes():
    x = torch.randn(256, 32)
    ws = [(torch.randn(32, 32) / 32**0.5).requires_grad_() for _ in range(8)]

    def keep_matmuls(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    def second(recompute: bool):
        loss = _mlp(_tanh_block, x, ws)
        torch.autograd.grad(loss, ws, retain_graph=not recompute)
        return torch.autograd.grad(_mlp(_tanh_block, x, ws) if recompute else loss, ws)

    def gelu_block(h, w):
        return torch.nn.functional.gelu(h @ w)

    schedules = {
        "plain": lambda b=_tanh_block: torch.autograd.grad(_mlp(b, x, ws), ws),
        "retain": lambda: second(False), "recomputed": lambda: second(True),
        "checkpoint": lambda b=_tanh_block: torch.autograd.grad(_mlp(b, x, ws, every=4), ws),
        "selective": lambda b=_tanh_block: torch.autograd.grad(_mlp(b, x, ws, every=4, policy=keep_matmuls), ws),
    }
    counts, peaks, grads = {}, {}, {}
    for name, run in schedules.items():
        run()
        with tk.measure("cpu") as probe:
            grads[name] = run()
        peaks[name] = probe.result.peak
        with tk.count_ops() as ops:
            run()
        counts[name] = (ops["mm"], ops["tanh"], ops["tanh_backward"])
    assert counts == {"plain": (23, 8, 8), "retain": (38, 8, 16), "recomputed": (46, 16, 16),
                      "checkpoint": (31, 16, 8), "selective": (23, 16, 8)}
    assert all(torch.equal(g, p) for name in grads for g, p in zip(grads[name], grads["plain"]))
    assert peaks["checkpoint"] < peaks["plain"] == peaks["retain"] < peaks["selective"]
    gelu = {}
    for name in ("plain", "checkpoint", "selective"):
        run = partial(schedules[name], b=gelu_block)
        run()
        with tk.measure("cpu") as probe:
            run()
        with tk.count_ops() as ops:
            run()
        gelu[name] = (probe.result.peak, ops["mm"], ops["gelu"])
    assert gelu["checkpoint"][0] < gelu["selective"][0] < gelu["plain"][0]  # the policy pays off for GELU
    # each segment's last GELU is not redone: GELU's rule reads its input, so no saved value needs that
    # output, and checkpoint stops recomputing once it has every value backward reads (early stop)
    assert [g[1:] for g in gelu.values()] == [(23, 8), (31, 14), (23, 14)]


def test_09_budget_the_peak_is_one_moment_and_kept_gradients_raise_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(256, 64), torch.randint(0, 10, (256,))

    def step(set_to_none: bool = True) -> None:
        optimizer.zero_grad(set_to_none=set_to_none)
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()

    freed = tk.budget(model, optimizer, step=step)
    kept = tk.budget(model, optimizer, step=lambda: step(set_to_none=False))
    grads = sum(p.numel() * 4 for p in model.parameters())
    assert freed.naive_sum > freed.peak  # category peaks at different moments do not add up
    assert freed.at_peak["gradients"] < grads <= kept.at_peak["gradients"]
    assert kept.peak > freed.peak
    # the batch is found through the lambda too: both budgets count it as the caller's
    assert kept.at_peak["application references"] == freed.at_peak["application references"] >= inputs.nbytes


@pytest.mark.slow
def test_10_compiled_residuals_min_cut_not_the_backend_recomputes():
    def f(x):
        return (x.sin() * x.cos()).exp().sum()

    x = torch.linspace(-2, 2, 1000, requires_grad=True)
    eager = tk.trace(f(x))
    kept = {}
    for backend in ("aot_eager_default_partitioner", "aot_eager", "aot_eager_decomp_partition", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend)
        node = compiled(x).grad_fn
        kept[backend] = [t.clone() for t in node.saved_tensors]
        (g,) = torch.autograd.grad(compiled(x), x)
        assert torch.allclose(g, torch.autograd.grad(f(x), x)[0], atol=1e-5)
    xd = x.detach()
    assert len(eager.storages) == 4 and len(kept["aot_eager_default_partitioner"]) == 4  # like eager
    assert torch.equal(kept["aot_eager"][0], xd) and torch.allclose(kept["aot_eager"][1], (xd.sin() * xd.cos()).exp())
    assert len(kept["aot_eager"]) == 2
    for backend in ("aot_eager_decomp_partition", "inductor"):
        assert len(kept[backend]) == 1 and torch.equal(kept[backend][0], xd)


def test_11_build_a_tape_pytorch_keeps_two_objects_on_one_storage():
    x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([2.0, -0.5, 0.25], dtype=torch.float64, requires_grad=True)
    y = torch.sigmoid(w * x) * torch.exp(x)
    sig = y.grad_fn.next_functions[0][0]
    own, read_by_mul = sig._saved_result, y.grad_fn._saved_self
    assert own is not read_by_mul and _same_storage(own, read_by_mul) and torch.equal(own, read_by_mul)
    assert [(r.node.op, r.slot) for r in tk.trace(y).residuals] == [
        ("mul", "self"), ("mul", "other"), ("sigmoid", "result"), ("exp", "result"), ("mul", "self"),
        ("mul", "other")]


def test_12_paper_formula_dropout_masks_are_a_cpu_and_meta_number():
    probs = torch.rand(2, 8, 16, 16, dtype=torch.bfloat16, requires_grad=True)
    masked = tk.trace(torch.nn.functional.dropout(probs, 0.1, True).sum()).residuals
    assert [(r.node.name, r.dtype) for r in masked] == [("MulBackward0", "bfloat16")]  # CPU: noise, 2 B each
    out, _ = torch.native_dropout(probs, 0.1, True)  # the op CUDA's F.dropout runs
    (r,) = tk.trace(out.sum()).residuals
    assert (r.node.name, r.dtype, r.nbytes) == ("NativeDropoutBackward0", "bool", probs.numel())
    small = tk.formula.korthikanti(seq=128, batch=2, hidden=256, heads=8, device="cpu")  # the lesson's block
    assert all(t.eager_bytes == 2 * t.formula_bytes for t in small.masks)
    assert small.ratio > 1.05 and small.eager_bytes_with_byte_masks / small.formula_bytes < 1.01
    assert any("native_dropout" in n and "cuda" in n for n in small.notes())
