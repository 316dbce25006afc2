"""build.py: source lines for the nodes a call makes on the way to its outputs."""

import pytest
import torch

import tracekit as tk


def test_nodes_inside_a_call_get_that_calls_line() -> None:
    lin = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with tk.capture() as cap:
        y = lin(x)  # linear: a TBackward0 for the weight, then AddmmBackward0
        z = y.sin()
    tr = cap.trace(z)
    by_name = {n.name: n for n in tr.nodes}
    assert set(by_name) == {"TBackward0", "AddmmBackward0", "SinBackward0"}
    line = by_name["AddmmBackward0"].source
    assert line is not None and line.startswith("test_build.py:")
    assert by_name["TBackward0"].source == line and by_name["TBackward0"].call == "linear"
    assert by_name["SinBackward0"].source != line and by_name["SinBackward0"].call == "sin"


def test_a_node_made_before_capture_takes_the_first_call_that_uses_it() -> None:
    a = torch.randn(5, requires_grad=True)
    pre = a * 2  # no source: made outside the capture block
    with tk.capture() as cap:
        b = pre.exp()  # the first call that reaches `pre`'s node
        c = pre.cos() + b
    tr = cap.trace(c)
    by_name = {n.name: n for n in tr.nodes}
    assert by_name["MulBackward0"].call == "exp"
    assert by_name["MulBackward0"].source == by_name["ExpBackward0"].source
    assert by_name["CosBackward0"].source != by_name["ExpBackward0"].source


def test_many_outputs_share_the_call() -> None:
    a = torch.randn(6, requires_grad=True)
    with tk.capture() as cap:
        parts = a.exp().split([2, 4])
        y = parts[0].sum() + parts[1].sum()
    tr = cap.trace(y)
    split = [n for n in tr.nodes if n.name.startswith("SplitWithSizes")]
    assert len(split) == 1 and split[0].call == "split"
    assert {n.call for n in tr.nodes} == {"exp", "split", "sum", "add"}


def test_user_names_for_module_parameters_match_named_parameters() -> None:
    from tracekit.frames import _named_parameters

    shared = torch.nn.Linear(2, 2)
    inner = torch.nn.Sequential(shared, torch.nn.Linear(2, 3, bias=False))
    net = torch.nn.Sequential(shared, torch.nn.LayerNorm(2), inner)
    net.register_parameter("scale", torch.nn.Parameter(torch.ones(1)))
    first: dict[int, str] = {}
    for name, p in _named_parameters(net, "net"):
        first.setdefault(id(p), name)
    assert first == {id(p): f"net.{name}" for name, p in net.named_parameters()}
    x = torch.randn(4, 2)
    y = (net(x) * net.scale).sum()
    tr = tk.trace(y)
    # `shared` is a local too, named first: its parameters keep that name
    assert tr.leaves.keys() >= {"shared.weight", "shared.bias", "net.1.weight", "inner.1.weight", "net.scale"}


def test_without_the_sequence_counter_the_nodes_on_the_way_still_get_their_calls_line(monkeypatch) -> None:
    """Where torch cannot say which sequence numbers a call took, capture reads the outputs' nodes and
    the nodes made on the way take their consumer's call: the same lines as with the counter."""
    import importlib

    capture_module = importlib.import_module("tracekit.capture")

    def lines() -> dict[str, tuple[str | None, str | None]]:
        lin = torch.nn.Linear(3, 2)
        a = torch.randn(5, requires_grad=True)
        pre = a.sin()  # made outside the capture block
        with tk.capture() as cap:
            y = lin(torch.randn(4, 3)).sum() * pre.exp().sum()
        return {n.name: (n.source, n.call) for n in cap.trace(y).nodes}

    with_counter = lines()
    monkeypatch.setattr(capture_module, "_NEXT_SEQUENCE_NR", None)
    without = lines()
    assert without == with_counter
    assert with_counter["TBackward0"] == with_counter["AddmmBackward0"] and with_counter["TBackward0"][1] == "linear"
    assert with_counter["MulBackward0"][1] == "mul" and with_counter["ExpBackward0"][1] == "exp"
    assert with_counter["SinBackward0"] == with_counter["ExpBackward0"]  # the first call that uses it


def test_inputs_and_needs_follow_next_functions_whichever_inputs_get_no_gradient() -> None:
    """Nodes whose inputs that get no gradient sit first, last, in the middle or everywhere but one, in one
    graph: each node's `needs` is next_functions' pattern of None, its inputs the others, in order."""
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    c, d = torch.randn(3), torch.randn(3)
    parts = [a * c, c * a, a * b, torch.addcmul(c, a, d), torch.addcmul(a, c, b), torch.addcmul(c, d, b),
             torch.where(a > 0, c, b), torch.lerp(c, a, d), (a * 2.0).exp()]
    y = sum(p.sum() for p in parts)
    tr = tk.trace(y)
    graph: list = []
    todo, seen = [y.grad_fn], set()
    while todo:  # every op node, by sequence number (the trace's order)
        g = todo.pop()
        if g in seen:
            continue
        seen.add(g)
        if not hasattr(g, "variable"):
            graph.append(g)
        todo += [n for n, _ in g.next_functions if n is not None]
    graph.sort(key=lambda g: g._sequence_nr())
    index = {g: i for i, g in enumerate(graph)}
    assert [n.name for n in tr.nodes] == [g.name() for g in graph]
    patterns = set()
    for node, g in zip(tr.nodes, graph):
        needs = tuple(n is not None for n, _ in g.next_functions)
        assert node.needs == needs, node.name
        patterns.add(needs)
        expected = [index.get(n, "leaf") for n, _ in g.next_functions if n is not None]
        got = [i if type(i) is int else "leaf" for i in node.inputs]
        assert got == expected, node.name
    assert {(True, False), (False, True), (False, True, False), (True, False, True), (False, False, True)} <= patterns


class _Doubled(torch.autograd.Function):
    """A custom Function: its node is read by build's slow path (node())."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        return g * 2


def _every_kind_of_node(x: torch.Tensor, c: torch.Tensor, steps: int, modify: bool = True,
                        rare: int = 1) -> torch.Tensor:
    """A graph with every way build reads a node: the common inline path (x * c saves only c), a custom
    Function, values packed by save_on_cpu, a list of saved tensors (indexing), a checkpointed region
    and a node whose second saved value was modified in place after it was
    saved (its first read, then the node read again, unless not `modify`); `steps` steps, the others `rare`
    times rarer than every 5th to 19th."""
    from torch.utils.checkpoint import checkpoint

    v, parts = x, []
    for k in range(steps):
        v = (v * 1.0001 + 0) * c
        if k % (5 * rare) == 0:
            v = _Doubled.apply(v)
        if k % (7 * rare) == 0:
            with torch.autograd.graph.save_on_cpu():
                v = v.sin()
        if k % (11 * rare) == 0:
            v = v[torch.tensor([0, 2, 1, 3, 4, 5, 6, 7])]
        if k % (13 * rare) == 0:
            v = checkpoint(lambda t: t.exp().cos(), v, use_reentrant=False)
        if k % (17 * rare) == 0:
            a = v.exp()
            parts.append((v * a).sum())
            if modify:
                a.add_(1)  # MulBackward0 saved self (v), then other (a): a is modified now
        if k % (19 * rare) == 0:
            parts.append((v * c).sum())
    return v.sum() + sum(parts)


def test_a_large_graphs_rows_moved_by_column_as_made_give_the_record_of_one_transposition(monkeypatch) -> None:
    """A graph of over 8,192 nodes has its rows moved into columns every 512 as they are made (_Table):
    its record is the same, JSON and views, as when all are transposed once at the end; every kind of
    node on the way, the slow path's among them, keeps its residuals and storages."""
    from tracekit import build

    torch.manual_seed(0)
    x, c = torch.randn(8, requires_grad=True), torch.randn(8)
    y = _every_kind_of_node(x, c, 2700, rare=8)
    moved = tk.trace(y)
    assert len(moved.nodes) >= build._MOVED_FROM
    monkeypatch.setattr(build, "_MOVED_FROM", 10**9)
    once = tk.trace(y)
    assert moved.to_json() == once.to_json()
    statuses = {r.status for r in moved.residuals}
    assert {"live", "modified in place"} <= {str(s) for s in statuses}
    places = {str(r.place) for r in moved.residuals}
    assert {"graph", "host (save_on_cpu)", "recomputed in backward (checkpoint)"} <= places
    assert [len(n.residuals) for n in moved.nodes] == [len(n.residuals) for n in once.nodes]
    assert str(moved.predict_backward()) == str(once.predict_backward())


@pytest.mark.parametrize("every", [1, 3])
def test_rows_moved_after_each_part_of_a_small_graph_give_the_same_record(monkeypatch, every: int) -> None:
    """The same with a move after every part of the build (a node at a time on a small graph), under
    capture (source lines and modules) and after backward released the values."""
    from tracekit import build

    torch.manual_seed(0)
    x, c = torch.randn(8, requires_grad=True), torch.randn(8)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU())
    with tk.capture() as cap:
        y = _every_kind_of_node(net(x), c, 40)
    expected = cap.trace(y).to_json()
    monkeypatch.setattr(build, "_MOVED_FROM", 0)
    monkeypatch.setattr(build, "_MOVED_EVERY", every)
    assert cap.trace(y).to_json() == expected
    y = _every_kind_of_node(x, c, 40, modify=False)
    y.backward()
    monkeypatch.setattr(build, "_MOVED_FROM", 10**9)
    released = tk.trace(y).to_json()
    monkeypatch.setattr(build, "_MOVED_FROM", 0)
    assert tk.trace(y).to_json() == released


def test_a_released_list_of_saved_tensors_traces_as_released() -> None:
    """After backward, PyTorch refuses to read a node's saved list at all (indexing saves its indices as
    one): the trace says the slot was released, one row per list, and does not raise PyTorch's error."""
    from tracekit.saved import saved_slots

    x, idx = torch.randn(8, requires_grad=True), torch.tensor([0, 2, 1])
    programs = {"IndexBackward0": lambda: (x * 1)[idx].sum(),
                "IndexPutBackward0": lambda: torch.zeros(8).index_put((idx,), (x * 2)[:3]).sum()}
    for name, made in programs.items():
        y = made()
        node = next(g for g in tk.trace(y).nodes if g.name == name)
        assert [(r.slot, str(r.status)) for r in node.residuals] == [("indices[0]", "live")]
        graph_node = y.grad_fn.next_functions[0][0]
        assert graph_node.name() == name
        y.backward()
        node = next(g for g in tk.trace(y).nodes if g.name == name)
        assert [(r.slot, str(r.status)) for r in node.residuals] == [("indices", "released")]
        assert [(s.slot, str(s.status)) for s in saved_slots(graph_node)] == [("indices", "released")]


def test_forward_order_is_by_sequence_number_whether_the_walk_met_the_nodes_newest_first_or_not() -> None:
    """A chain is walked newest first (no sort needed); a graph with branches is not: both come out by
    sequence number, and the map from a node's number to its row (made when first asked) follows it."""
    from tracekit.build import _forward_order, _leaves_and_ops
    from tracekit.internals import SEQUENCE_NR
    from tracekit.live import walk

    x = torch.randn(4, requires_grad=True)
    v = x
    for _ in range(30):
        v = v * 1.5
    b = x.sin()
    branched = (x.exp() * 2 + b).sum()  # the add's second input (b) is older than its first: walked first
    for y in (v.sum(), branched):
        ops = _leaves_and_ops(walk([y.grad_fn]))[1]
        nodes, seq, unique = _forward_order(ops)
        expected = sorted(ops, key=SEQUENCE_NR)
        assert nodes == expected and seq == [SEQUENCE_NR(g) for g in expected] and unique
        tr = tk.trace(y)
        assert tr._live.index_by_seq == {s: i for i, s in enumerate(seq)}
        assert [n.name for n in tr.nodes] == [g.name() for g in expected]
    walked = _leaves_and_ops(walk([branched.grad_fn]))[1]
    assert [SEQUENCE_NR(g) for g in walked] != sorted(map(SEQUENCE_NR, walked), reverse=True)  # not newest first


@pytest.mark.parametrize("shape", [(), (1,), (2, 3), (0,), (2, 0, 3), (1, 1, 2, 2)])
def test_each_saved_tensors_bytes_shape_and_dtype_are_its_own_whatever_was_seen_before(shape) -> None:
    # fill keeps each shape's element count and each dtype's bytes per element once read: tensors of one
    # shape and many dtypes, and of one dtype and many shapes, in one graph and in a graph after it
    x = torch.ones(shape, requires_grad=True)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int64, torch.bool,
              torch.complex64]
    constants = [torch.ones(shape, dtype=dt) for dt in dtypes] + [torch.ones((3, *shape), dtype=torch.int16)]
    for _ in range(2):  # the second trace meets every shape and dtype again
        y = sum((x * c).real.sum() if c.is_complex() else (x * c).sum() for c in constants)
        saved = [r for r in tk.trace(y).residuals if r.slot == "other"]
        assert len(saved) == len(constants)
        for r, c in zip(saved, constants):
            assert r.shape == tuple(c.shape)
            assert r.nbytes == c.numel() * c.element_size()
            assert r.dtype == str(c.dtype).removeprefix("torch.")


def test_each_nodes_saved_attribute_is_its_own_value_and_type_when_nodes_share_one():
    """One (name, value) pair is made per int or str value of a node type's one attribute and shared by
    the nodes that saved it; 1 and 1.0 (equal as keys) stay apart, and a type whose value is new at every
    node keeps no pile of pairs."""
    from tracekit.build import _PAIRS_KEPT, _TYPES

    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    y = (torch.add(a, b) + torch.add(a, b, alpha=2) + torch.add(a, b, alpha=1.0) + torch.add(a, b, alpha=0.5)
         + torch.nn.functional.gelu(a) + torch.nn.functional.gelu(b, approximate="tanh") + torch.add(a, b))
    tr = tk.trace(y.sum())
    seen = [(n.name, n.attributes) for n in tr.nodes if n.name in ("AddBackward0", "GeluBackward0")]
    alphas = [(v, type(v)) for name, attrs in seen if name == "AddBackward0" for v in attrs.values()]
    assert alphas[:4] == [(1, int), (2, int), (1, int), (1.0, float)]  # a + b's own alpha between each call's
    assert (0.5, float) in alphas and alphas.count((1, int)) == 8 and alphas.count((1.0, float)) == 1
    assert [attrs for name, attrs in seen if name == "GeluBackward0"] == [{"approximate": "none"},
                                                                       {"approximate": "tanh"}]
    firsts = [tr.record.node_columns.attributes[n.index] for n in tr.nodes
              if n.attributes == {"alpha": 1} and type(n.attributes["alpha"]) is int]
    assert len(firsts) == 8 and all(pairs is firsts[0] for pairs in firsts)  # one tuple, shared

    v = torch.randn(3, requires_grad=True)
    for k in range(2, 2 + 3 * _PAIRS_KEPT):
        v = v.pow(k).tanh()
    tr = tk.trace(v.sum())
    exponents = [n.attributes["exponent"] for n in tr.nodes if n.name == "PowBackward0"]
    assert exponents == list(range(2, 2 + 3 * _PAIRS_KEPT))
    kept = next(info[5][3] for (kind, _), info in _TYPES.items() if info[0] == "PowBackward0")
    assert len(kept) == _PAIRS_KEPT


def test_the_inputs_column_is_made_when_read_and_reads_as_each_nodes_inputs():
    """The build keeps every node's inputs as one flat tuple and makes the column on its first read:
    node by node it is the graph's next_functions (leaf labels, node indexes; an input that gets no
    gradient left out), and pickle, JSON and equality see a plain tuple."""
    import pickle

    from tracekit.rows import Formatted

    w = torch.randn(3, requires_grad=True)
    c = torch.randn(3)  # gets no gradient: MulBackward0's next_functions has None for it
    h = (w * c).exp()
    y = (h * w + c * h).sum()
    tr = tk.trace(y)
    column = tr.record.node_columns.inputs
    assert isinstance(column, Formatted) and column._text is None
    assert [n.name for n in tr.nodes] == ["MulBackward0", "ExpBackward0", "MulBackward0", "MulBackward0",
                                          "AddBackward0", "SumBackward0"]
    assert [tr.nodes[i].inputs for i in range(6)] == [("w",), (0,), (1, "w"), (1,), (2, 3), (4,)]
    assert [n.needs for n in tr.nodes][0] == (True, False) and tr.nodes[3].needs == (False, True)
    assert type(column._text) is tuple and column._text == ((("w",), (0,), (1, "w"), (1,), (2, 3), (4,)))
    assert pickle.loads(pickle.dumps(tr.record)) == tr.record
    assert tk.load_trace(tr.to_json()).record.node_columns.inputs == column
