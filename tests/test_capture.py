"""Residuals come from the runtime; roles, rules, attributes; source lines; bad input."""

import contextlib
import importlib
import sys

import pytest
import torch

import tracekit as tk
from tracekit.rules import NOT_DESCRIBED


def neuron():
    x = torch.tensor(1.0, requires_grad=True)
    w = torch.tensor(2.0, requires_grad=True)
    with tk.capture() as cap:
        y = torch.sigmoid(w * x - 0.5)  # the line the trace must point at
    return x, w, y, cap.trace(y)


def test_neuron_trace_has_forward_order_residuals_and_source():
    x, w, y, tr = neuron()
    assert [n.name for n in tr.nodes] == ["MulBackward0", "SubBackward0", "SigmoidBackward0"]
    assert [n.op for n in tr.nodes] == ["mul", "sub", "sigmoid"]
    assert [n.index for n in tr.nodes] == [0, 1, 2]
    assert all(n.source and n.source.startswith("test_capture.py:") for n in tr.nodes)
    assert {(r.node.name, r.slot) for r in tr.residuals} == {
        ("MulBackward0", "self"), ("MulBackward0", "other"), ("SigmoidBackward0", "result"),
    }
    by_slot = {r.slot: r for r in tr.residuals}
    assert by_slot["other"].rule == "grad_self = grad * other"
    assert by_slot["self"].rule == "grad_other = grad * self"
    assert "result * (1 - result)" in by_slot["result"].rule
    assert by_slot["self"].role == "input leaf w" and by_slot["other"].role == "input leaf x"
    assert by_slot["result"].role.startswith("output of #2 SigmoidBackward0")
    assert by_slot["result"].shape == () and by_slot["result"].dtype == "float32" and by_slot["result"].nbytes == 4
    assert tr.steps == []
    assert abs(y.item() - 0.8176) < 1e-4


def test_trace_without_capture_walks_graph_only():
    x = torch.randn(3, requires_grad=True)
    y = x.exp().sum()
    tr = tk.trace(y)
    assert [n.op for n in tr.nodes] == ["exp", "sum"]
    assert all(n.source is None for n in tr.nodes)
    assert [r.slot for r in tr.residuals] == ["result"]
    assert tr.nodes[1].attributes["self_sym_sizes"] == (3,)


def _runtime_saved_tensors(grad_fn):
    """An independent count: every tensor reachable through PyTorch's _saved_* getters."""
    found, todo, seen = [], [grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "_forward_cls"):
            found += [(node.name(), "saved_tensors") for _ in node.saved_tensors]
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr)
                items = value if isinstance(value, tuple) else (value,)
                found += [(node.name(), attr) for v in items if isinstance(v, torch.Tensor)]
        todo += [n for n, _ in node.next_functions]
    return found


class SavesOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, scale):
        out = torch.sigmoid(a) * scale
        ctx.save_for_backward(a, out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved_tensors
        s = torch.sigmoid(a)
        return grad * ctx.scale * s * (1 - s), None


GRAPHS = {
    "mlp": lambda a, w: torch.nn.functional.gelu(a @ w).pow(2).mean(),
    "softmax": lambda a, w: torch.log_softmax(a @ w, dim=1).sum() + torch.softmax(a, 1).max(),
    "norm": lambda a, w: torch.nn.functional.layer_norm(a, (4,)).tanh().sum(),
    "views": lambda a, w: (a.t()[1:3] * a.reshape(4, 4)[:2]).sum(),
    "custom": lambda a, w: SavesOutput.apply(a * 2, 3.0).sum(),
    "cat": lambda a, w: torch.cat([a.sin(), a.cos(), a.exp()], 1).div(a.sum() + 5).log1p().sum(),
    "indexing": lambda a, w: a[[0, 2]].relu().sum() + torch.embedding(w, torch.tensor([1, 3])).sum(),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_runtime_saved_tensor_appears_once(name):
    a = torch.randn(4, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    y = GRAPHS[name](a, w)
    tr = tk.trace(y)
    expected = _runtime_saved_tensors(y.grad_fn)
    assert len(tr.residuals) == len(expected) > 0
    assert sorted({r.node.name for r in tr.residuals}) == sorted({n for n, _ in expected})
    assert all(r.shape is not None and r.storage is not None for r in tr.residuals)


def test_custom_function_slots_and_attributes():
    a = torch.randn(5, requires_grad=True)
    y = SavesOutput.apply(a * 2, 3.0).sum()
    tr = tk.trace(y)
    node = next(n for n in tr.nodes if n.name == "SavesOutputBackward")
    assert node.op == "SavesOutput"
    assert [r.slot for r in node.residuals] == ["saved_tensors[0]", "saved_tensors[1]"]
    assert node.residuals[0].role == "output of #0 MulBackward0"
    assert node.residuals[1].shape == (5,)
    # a custom Function's rule is its own backward, in the table's words (issue 38: every node has a rule)
    assert node.residuals[0].rule == "grad_inputs = SavesOutput.backward(ctx, grad), reading saved_tensors"
    assert node.residuals[0].rule != NOT_DESCRIBED
    assert node.attributes == {"scale": 3.0}


def test_non_tensor_saved_values_are_attributes_not_residuals():
    a = torch.randn(2, 3, requires_grad=True)
    y = a.pow(3).sum()
    tr = tk.trace(y)
    pow_node = tr.nodes[0]
    assert pow_node.attributes == {"exponent": 3}
    assert [r.slot for r in pow_node.residuals] == ["self"]
    assert tr.nodes[1].residuals == [] and tr.nodes[1].attributes == {"self_sym_sizes": (2, 3)}


def test_scalar_only_multiplication_saves_just_the_scalar():
    big = torch.randn(100, requires_grad=True)
    tr = tk.trace((big * 2.0).sum())
    (mul,) = [n for n in tr.nodes if n.op == "mul"]
    assert [r.slot for r in mul.residuals] == []  or [r.slot for r in mul.residuals] == ["other"]
    assert all(r.nbytes <= 8 for r in mul.residuals)  # the 400-byte input is not saved


def test_op_outside_the_lesson_table_gets_pytorchs_rule():
    a = torch.rand(4, requires_grad=True) + 0.5
    y = torch.atan2(a, a.detach() + 1).cumprod(0).sum()
    tr = tk.trace(y)
    atan = next(n for n in tr.nodes if n.op == "atan2")
    assert atan.described and "Atan2Backward0" not in tk.RULES
    assert atan.residuals and all(r.rule.startswith("PyTorch: ") and "atan2_backward" in r.rule
                                  for r in atan.residuals)


def test_source_points_at_the_users_line():
    a = torch.randn(3, requires_grad=True)
    with tk.capture() as cap:
        b = a.exp()
        c = b.sin().sum()
    tr = cap.trace(c)
    lines = [int(n.source.split(":")[1]) for n in tr.nodes]
    assert lines[0] + 1 == lines[1] == lines[2]
    assert tr.nodes[0].call == "exp"


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(tk.NotATensorError, match="not a torch.Tensor"):
        tk.trace(3.0)
    with pytest.raises(tk.NoHistoryError, match="requires_grad=True"):
        tk.trace(torch.ones(2))
    with pytest.raises(tk.NoHistoryError, match="leaf"):
        tk.trace(torch.ones(2, requires_grad=True))
    with pytest.raises(tk.NotATensorError):
        tk.trace()
    with tk.capture():
        with pytest.raises(tk.NestedCaptureError, match="already active"):
            with tk.capture():
                pass
    with tk.capture():  # the outer block closed cleanly: a new one opens
        pass
    assert issubclass(tk.NoHistoryError, tk.TracekitError)


def test_already_freed_graph_traces_with_residuals_marked_freed():
    x = torch.randn(3, requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    tr = tk.trace(y)
    assert tr.residuals and all(r.status == "released" for r in tr.residuals)
    assert all(r.free_point() == "already freed before tracing" for r in tr.residuals)
    assert tr.saved_bytes == 0
    assert "already freed" in tr.text()


def test_a_call_spread_over_lines_gets_the_line_python_reports():
    """Capture keeps the code and offset of the user's frame and reads the line at build: the same
    line `frame.f_lineno` gives, for calls written over several lines, in a loop and in a lambda."""
    a = torch.randn(3, requires_grad=True)
    seen = []
    with tk.capture() as cap:
        b = torch.mul(
            a,
            2.0,
        )
        seen.append(sys._getframe().f_lineno)
        c = (b
             .sin())
        seen.append(sys._getframe().f_lineno)
        for _ in range(2):
            c = (lambda v: v.cos())(c)
        seen.append(sys._getframe().f_lineno)
        d = c.sum()
    tr = cap.trace(d)
    lines = {n.op: int(n.source.split(":")[1]) for n in tr.nodes}
    assert lines["mul"] == seen[0] - 4  # the line the call starts on, as f_lineno says
    assert lines["sin"] == seen[1] - 1  # `.sin()` is on the second line of its statement
    assert lines["cos"] == seen[2] - 1 and lines["sum"] == seen[2] + 1
    assert [n.call for n in tr.nodes] == ["mul", "sin", "cos", "cos", "sum"]


def test_where_at_reads_the_line_where_reads_from_a_live_frame():
    from tracekit.frames import where, where_at

    texts: dict = {}
    for _ in range(2):  # a second read of the same place comes from what the first made
        frame = sys._getframe()
        assert where_at(texts, frame.f_code, frame.f_lasti) == where(frame)
    assert len(texts) == 1 and where_at(texts, None, 0) is None


def test_an_unhashable_callable_passed_to_torch_function_is_recorded_by_name():
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]
        __name__ = "my_call"

        def __call__(self, t):
            return t * 3

    a = torch.randn(2, requires_grad=True)
    func = Unhashable()
    with tk.capture() as cap:
        y = torch.overrides.handle_torch_function(func, (a,), a)
        z = y.sum()
    tr = cap.trace(z)
    assert [n.call for n in tr.nodes] == ["my_call", "sum"]
    assert torch.equal(y, a * 3)


def test_the_call_names_kept_per_function_stay_bounded():
    capture_module = importlib.import_module("tracekit.capture")  # tk.capture, the class, shadows the module

    a = torch.randn(2, requires_grad=True)
    with tk.capture() as cap:
        for k in range(capture_module._CALLS_KEPT + 10):  # a new function each time, as a re-run cell makes
            def op(t, k=k):
                return t * 2

            op.__name__ = f"op{k}"
            y = torch.overrides.handle_torch_function(op, (a,), a)
        z = y.sum()
    assert len(capture_module._CALLS) <= capture_module._CALLS_KEPT
    assert [n.call for n in cap.trace(z).nodes] == [f"op{capture_module._CALLS_KEPT + 9}", "sum"]


def _frees(tr):
    return [(r.node.name, r.slot, r.freed_at, r.held_by) for r in tr.residuals]


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x).exp()  # a local the graph saves: the forward's frame holds it until it returns
        return h.sin().sum()


def _ends_in_a_function(x: torch.Tensor) -> torch.Tensor:
    h = x.exp()
    return h.sin().sum()


@pytest.mark.parametrize("program", ["function", "module"])
@pytest.mark.parametrize("when", ["trace and backward inside", "backward after another call inside"])
def test_capture_holds_no_frame_of_the_users_that_would_keep_a_residual_alive(program, when):
    """A function's (or a module's forward's) last torch call under capture: its frame returned, and
    its locals (here h, saved by exp and sin) must be freed when backward releases them, as without
    capture; capture kept that frame to walk the stack once per loop, and so its locals."""
    torch.manual_seed(0)
    x = torch.randn(8, 64, requires_grad=True)
    block = _Block()
    run = _ends_in_a_function if program == "function" else block
    plain = tk.trace(run(x))
    plain.backward()
    with tk.capture() as cap:
        y = run(x)
        tr = cap.trace(y)
        if when == "backward after another call inside":
            other = _ends_in_a_function(x.detach())  # its frame is the last torch call's now
        tr.backward()
    assert _frees(tr) == _frees(plain)
    h_rows = [(freed, held) for name, _, freed, held in _frees(tr) if name in ("ExpBackward0", "SinBackward0")]
    assert len(h_rows) == 2 and all(freed is not None and held is None for freed, held in h_rows)  # h: freed
    assert [n.name for n in tr.nodes] == [n.name for n in plain.nodes]
    if when == "backward after another call inside":
        assert other.item() == _ends_in_a_function(x.detach()).item()


def _retained_by_one_trace(earlier_calls: int) -> int:
    """The bytes a one-node trace keeps, made under a capture that saw `earlier_calls` calls before."""
    import gc
    import tracemalloc

    x = torch.ones(2, requires_grad=True)
    with tk.capture() as cap:
        for _ in range(earlier_calls):
            x * 2  # a call that makes a node: capture records its line
        y = x.exp()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tr = cap.trace(y)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert [n.call for n in tr.nodes] == ["exp"]
    return kept


def test_a_trace_keeps_nothing_of_the_calls_that_made_none_of_its_nodes():
    """A trace's lines are made text when first read, from the calls that made its nodes: a trace
    kept per step of a long loop under one capture must not keep every call the capture saw before
    (memory growing with the square of the steps)."""
    few, many = _retained_by_one_trace(10), _retained_by_one_trace(20000)
    assert many - few < 100_000, (few, many)


def test_a_capture_kept_over_a_training_loop_gives_each_step_its_own_calls():
    """One `with tk.capture()` around a whole loop, a trace per step: each trace reads and keeps the
    calls of its own graph (its lines, modules and the in-place calls made after it began), not every
    call the capture saw since the loop began (each trace used to cost more than the last, and step
    3,000's record held every optimizer update: 447 KB of JSON for a 6-node graph)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.01, foreach=False)
    x = torch.randn(4, 8)
    kept = []
    with tk.capture() as cap:
        for step in range(200):
            h = m[0](x)
            loss = m[2](h.relu()).pow(2).mean()
            if step in (0, 199):
                h.mul_(1)  # after the forward: the graph's own in-place call, on a value relu saved
            tr = cap.trace(loss)
            if step in (0, 1, 199):
                kept.append(tr)
            with contextlib.suppress(RuntimeError):  # relu's saved value was modified at steps 0 and 199
                tr.backward()
            opt.step()
            opt.zero_grad()
    first, plain, last = kept
    assert [(mu.call, mu.version) for mu in first.mutations] == [("mul_", 1)]
    assert [(mu.call, mu.version) for mu in last.mutations] == [("mul_", 1)]  # not 199 steps' updates
    assert plain.mutations == []
    for tr in (plain, last):
        assert [(n.op, n.module, n.source.split(":")[-1] if n.source else None) for n in tr.nodes] == \
               [(n.op, n.module, n.source.split(":")[-1] if n.source else None) for n in first.nodes]
    assert abs(len(last.to_json()) - len(first.to_json())) < 200
    assert {n.module for n in last.nodes} == {"Linear", None}  # each called on its own: the outermost


def test_a_wrapper_subclass_among_the_callers_variables_is_named_not_fatal() -> None:
    from torch.testing._internal.two_tensor import TwoTensor  # a wrapper subclass: its storage holds no memory

    x = torch.randn(3, requires_grad=True)
    pair = TwoTensor(torch.randn(3), torch.randn(3))  # a variable the traced graph never uses
    tr = tk.trace((x * 2).sum())
    assert [r.slot for r in tr.residuals] == ["other"]
    with tk.capture() as cap:
        y = (x.exp() * pair.a).sum()
    assert [r.slot for r in cap.trace(y).residuals] == ["result", "other"]


def test_a_sparse_leaf_traces_and_a_graph_inside_torch_func_says_why_it_cannot() -> None:
    indices, values = torch.tensor([[0, 1, 2], [2, 0, 1]]), torch.tensor([1.0, 2.0, 3.0])
    sparse = torch.sparse_coo_tensor(indices, values, (3, 3), check_invariants=True).requires_grad_()
    w = torch.randn(3, 2, requires_grad=True)
    tr = tk.trace(torch.sparse.mm(sparse, w).sum())
    assert {r.slot for r in tr.residuals} >= {"mat1", "mat2"}
    tr.backward()
    assert sparse.grad is not None and sparse.grad.layout == torch.sparse_coo

    raised = []

    def loss(x: torch.Tensor) -> torch.Tensor:
        y = (x * x.exp()).sum()
        with pytest.raises(tk.NoStorageError, match="torch.func") as caught:
            tk.trace(y)
        raised.append(caught.value)
        return y

    torch.func.grad(loss)(torch.randn(3))
    assert len(raised) == 1 and isinstance(raised[0].__cause__, NotImplementedError)
