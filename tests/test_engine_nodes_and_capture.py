"""Issue 38 in small: every node the engine can create has a rule (its own nodes included, found
by reading torch's headers), capture installs no global module hook and labels modules by their
real paths, holders are named (buffers, dicts, closures), and `tk.trace(f(x)).backward()` works."""

import gc
import inspect
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import tracekit as tk
from tracekit.rules import ENGINE_RULES, NOT_DESCRIBED, input_rules

HEADERS = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "autograd" / "functions"


@pytest.mark.skipif(not HEADERS.is_dir(), reason="this torch ships no C++ headers")
def test_the_engines_own_node_types_all_have_rules():
    found = set()
    for header in HEADERS.glob("*.h"):
        found |= set(re.findall(r"struct (?:TORCH_\w+ )?(\w+)(?: final)? : public (?:Node|Error|TraceableFunction)\b",
                                header.read_text()))
    assert {"CopySlices", "CopyBackwards", "AccumulateGrad", "DelayedError"} <= found
    assert {f"torch::autograd::{name}" for name in found} <= set(ENGINE_RULES)


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def _engine_graph():
    b = torch.randn(3, requires_grad=True)
    x = torch.zeros(4, 3)
    x[0] = b * 2  # CopySlices
    z = torch.zeros(3)
    z.copy_(b)  # CopyBackwards
    lin = nn.Linear(3, 3)
    lin.register_full_backward_hook(lambda *args: None)  # BackwardHookFunctionBackward
    return x.sum() + z.sum() + lin(b).sum() + Twice.apply(b).sum(), b


def test_every_node_has_a_rule_in_the_tables_words():
    y, b = _engine_graph()
    tr = tk.trace(y)
    names = {n.name for n in tr.nodes}
    assert {"torch::autograd::CopySlices", "torch::autograd::CopyBackwards", "BackwardHookFunctionBackward",
            "TwiceBackward"} <= names
    assert all(n.described for n in tr.nodes)
    assert all(r.rule != NOT_DESCRIBED for r in tr.residuals)
    (saved,) = [r for n in tr.nodes if n.name == "TwiceBackward" for r in n.residuals]
    assert saved.rule == "grad_inputs = Twice.backward(ctx, grad), reading saved_tensors"
    copy = input_rules("torch::autograd::CopySlices", 2)
    assert [name for name, _ in copy] == ["self", "src"]
    grad = torch.autograd.grad(y, b)[0]
    y2, b2 = _engine_graph()
    tk.trace(y2).backward()
    assert b2.grad.shape == grad.shape


class MakesItsLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))

    def forward(self, x, labels):
        return nn.CrossEntropyLoss()(self.body(x), labels)  # a module made during the call


def test_module_labels_are_named_modules_paths_or_made_during_the_call_and_no_global_hook():
    model = MakesItsLoss()
    seen = []
    with tk.capture() as cap:
        seen.append(dict(torch.nn.modules.module._global_forward_pre_hooks))
        loss = model(torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 4, 5]))
    assert seen == [{}]  # nothing global while capturing
    tr = cap.trace(loss)
    labels = {n.module for n in tr.nodes}
    assert {"body.0 (Linear)", "body.1 (BatchNorm1d)", "CrossEntropyLoss (made during the call)"} <= labels
    paths = dict(model.named_modules())
    for label in labels - {None, "MakesItsLoss", "CrossEntropyLoss (made during the call)"}:
        assert label.rpartition(" (")[0] in paths


def test_holders_named_buffers_dict_entries_and_closures():
    bn = nn.BatchNorm1d(8)
    batch = {"x": torch.randn(6, 8)}
    def scaler():
        scale = torch.randn(6, 8)  # only weigh's closure holds it

        def weigh(h):
            return h * scale
        return weigh

    weigh = scaler()

    def step():
        return weigh(bn(batch["x"] * 1.5)).sum()

    with tk.capture() as cap:
        y = step()
    tr = cap.trace(y)
    tr.backward()
    held = {r.slot: r.held_by for r in tr.residuals if r.held_by}
    assert held["running_mean"] == "the module's buffer bn.running_mean"
    assert held["running_var"] == "the module's buffer bn.running_var"
    assert "the closure of weigh (its scale)" in held.values()
    assert not any("outside this graph" in h for h in held.values())


def test_a_temporary_output_is_kept_by_its_trace_and_a_held_one_is_not():
    a = torch.randn(1 << 18, requires_grad=True)
    tr = tk.trace(a.exp().sum()).backward()  # nobody else holds the output: the trace keeps it
    assert torch.equal(a.grad, a.detach().exp())
    assert tr.steps and all(r.freed_at is not None for r in tr.residuals)
    tr2 = tk.trace(a.exp().sum())
    (owned,) = tr2.graph_owned_storages()
    assert not owned.expired()
    del tr2
    gc.collect()
    y = a.exp().sum()
    tr3 = tk.trace(y)
    (owned3,) = tr3.graph_owned_storages()
    del y  # held by the caller: dropping it frees the graph, the trace kept
    assert owned3.expired()
    with pytest.raises(tk.GraphReleasedError):
        tr3.backward()


@pytest.mark.xfail(strict=True, reason="CopySlices keeps the wrapped op's saved values in a C++ member "
                   "PyTorch does not expose to Python: the trace cannot see them (README: Residuals)")
def test_a_write_into_a_view_by_an_op_that_saves_counts_its_saved_values():
    from tracekit.storage import storage_key

    seen = {}

    def pack(t):
        seen[storage_key(t)] = t.untyped_storage().nbytes()
        return t

    b = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = torch.randn(4, 3) * 1.0
        x[1] *= b  # mul_ on a view saves the view's old values for b's gradient, inside CopySlices
        y = x.sum()
    assert tk.trace(y).saved_bytes == sum(seen.values())


def test_what_a_checkpoint_keeps_is_released_with_its_region_and_round_trips():
    from torch.utils.checkpoint import checkpoint

    a = torch.randn(1 << 16, requires_grad=True)
    y = (checkpoint(lambda v: v.sin().cos(), a * 2, use_reentrant=False) * 2).sum()
    tr = tk.trace(y)
    (kept,) = [r for r in tr.residuals if r.slot.startswith("checkpoint ")]
    assert kept.held_in == "kept by checkpoint to recompute" and kept.nbytes == 4 << 16
    assert kept.role == f"output of #{kept.producer} MulBackward0"  # the segment's input, as what it is
    tr.backward()
    step = {s.node.index: s.index for s in tr.steps}[kept.node.index]
    assert kept.released_at == step and kept.freed_at is not None  # its memory went once the region had run
    back = tk.load_trace(tr.to_json())
    assert back.text() == tr.text() and [r.held_in for r in back.residuals] == [r.held_in for r in tr.residuals]


def _tanh_twice(xs):  # a generator: its frame resumes under whichever module asks for the next value
    for x in xs:
        yield torch.tanh(x) * 2


class _Pull(nn.Module):
    def forward(self, values):
        return next(values)


class _Twice(nn.Module):
    """Two modules of one kind, each called once on the same input, their results added."""

    def __init__(self, kind: type) -> None:
        super().__init__()
        self.first, self.second = kind(), kind()

    def forward(self, value):
        return self.first(value) + self.second(value)


def _helper(h):  # one code, called from two modules' forwards: two frames
    return h.cos()


class _Helped(nn.Module):
    def forward(self, h):
        return _helper(h)


def test_each_call_gets_its_own_line_and_module_in_a_loop_a_generator_and_a_shared_helper():
    """A frame that makes call after call is walked once (its callers cannot change while it runs);
    a generator's frame resumes under other modules, and a helper's code runs in new frames: each
    call still gets its own line and module."""
    xs = [torch.randn(3, requires_grad=True) for _ in range(2)]
    here = inspect.currentframe().f_lineno
    with tk.capture() as cap:
        h = _Twice(_Pull)(_tanh_twice(iter(xs)))
        for _ in range(3):
            h = h.sin()
            h = h * 1.5
        h = _Twice(_Helped)(h)
    tr = cap.trace(h.sum())
    assert [n.module for n in tr.nodes if n.name == "TanhBackward0"] == ["first (_Pull)", "second (_Pull)"]
    sin_lines = {n.source for n in tr.nodes if n.name == "SinBackward0"}
    mul_lines = {n.source for n in tr.nodes if n.name == "MulBackward0" and n.module is None}
    assert sin_lines == {f"test_engine_nodes_and_capture.py:{here + 4}"}
    assert mul_lines == {f"test_engine_nodes_and_capture.py:{here + 5}"}
    cos = [n for n in tr.nodes if n.name == "CosBackward0"]
    assert [n.module for n in cos] == ["first (_Helped)", "second (_Helped)"]
    assert len({n.source for n in cos}) == 1 and cos[0].source.endswith(f":{_helper.__code__.co_firstlineno + 1}")


@pytest.mark.parametrize("kept", ["text", "the input"])
def test_a_custom_function_whose_ctx_holds_a_variable_attribute_is_an_op_not_a_leaf(kept):
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.variable = x if kept == "the input" else "a note"  # any name a forward may set on ctx
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 + 0 * x

    def program(x):
        return (Scale.apply(x) * x).sum()

    plain = torch.linspace(-1, 1, 3, requires_grad=True)
    program(plain).backward()
    x = torch.linspace(-1, 1, 3, requires_grad=True)
    tr = tk.trace(program(x))
    assert [n.name for n in tr.nodes] == ["ScaleBackward", "MulBackward0", "SumBackward0"]
    assert tr.nodes[1].inputs[0] == 0 and tr.nodes[0].residuals[0].slot.startswith("saved_tensors")
    tr.backward()
    assert [s.node.name for s in tr.steps] == ["SumBackward0", "MulBackward0", "ScaleBackward"]
    assert torch.equal(x.grad, plain.grad)
