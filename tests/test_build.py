"""build.py: source lines for the nodes a call makes on the way to its outputs."""

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
