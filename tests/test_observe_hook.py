"""The observed backward's single hook: the order it records is the engine's own, releases and
frees land on the right steps, and nothing of it stays active after backward."""

import re

import pytest
import torch
import torch.utils.checkpoint as checkpoint

import tracekit as tk
from tracekit.lifetimes import RETAINED
from tracekit.saved import released


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return t * 2

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * 2 + t * 0


def branching(a, b):
    h = a * b
    left = h.exp()[:, :2]
    right = Twice.apply(h.sin())
    idx = torch.tensor([0, 2])
    picked = right[idx]  # IndexBackward0 saves a tensor list
    return (left.sum() + picked.pow(2).sum() + torch.stack([h, h.t()]).tanh().sum())


def checkpointed(a, b):
    h = checkpoint.checkpoint(lambda v: (v * b).sin().cos(), a, use_reentrant=False)
    return (h * a).sum()


def chain(a, b):
    v = a
    for _ in range(50):
        v = (v * 1.01).sigmoid()
    return (v * b).sum()


def reference_order(build, seed):
    """The order a plain per-node pre-hook sees (PyTorch's documented hook), without tracekit."""
    torch.manual_seed(seed)
    a, b = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    y = build(a, b)
    tr = tk.trace(y)  # only to number the nodes the same way
    index = {g: i for i, g in enumerate(tr._graph_nodes)}
    seen = []
    handles = [g.register_prehook(lambda grads, g=g: seen.append(index[g])) for g in tr._graph_nodes]
    y.backward()
    for h in handles:
        h.remove()
    return seen, a.grad, b.grad


@pytest.mark.parametrize("build", [branching, checkpointed, chain])
@pytest.mark.parametrize("seed", [0, 1])
def test_observed_order_is_the_engines_and_gradients_are_bitwise_equal(build, seed):
    expected, ga, gb = reference_order(build, seed)
    torch.manual_seed(seed)
    a, b = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    with tk.capture() as cap:
        y = build(a, b)
    tr = cap.trace(y).backward()
    assert [s.node.index for s in tr.steps] == expected
    assert len(expected) == len(tr.nodes)
    assert torch.equal(a.grad, ga) and torch.equal(b.grad, gb)
    # every residual autograd held is released exactly at its own node's step, and autograd agrees
    step_of = {s.node.index: s.index for s in tr.steps}
    for node, g in zip(tr.nodes, tr._graph_nodes):
        for r in node.residuals:
            assert r.status == "released" and r.released_at == step_of[node.index], r.label
        assert released(g, [r.slot for r in node.residuals]) == [r.slot for r in node.residuals]
    assert sorted(r.label for s in tr.steps for r in s.released) == sorted(r.label for r in tr.residuals)


def test_frees_land_on_the_step_that_dropped_the_last_holder():
    a = torch.randn(1000, requires_grad=True)
    h = a.exp()  # saved by exp (result), sin (self) and mul (other): freed after the last of them
    y = (h.sin() * h).sum()
    del h
    tr = tk.trace(y).backward()
    names = [s.node.name for s in tr.steps]
    (shared,) = [s for s in tr.storages if len(s.residuals) == 3]
    freed_at = {r.freed_at for r in shared.residuals}
    assert freed_at == {max(r.released_at for r in shared.residuals)}
    assert names[freed_at.pop()] == "ExpBackward0"
    assert sum(len(s.freed) for s in tr.steps) == len(tr.graph_owned_storages())


def test_on_step_sees_the_previous_steps_releases():
    a = torch.randn(4, requires_grad=True)
    y = a.exp().sin().sum()
    tr = tk.trace(y)
    seen = []
    tr.backward(on_step=lambda s: seen.append((s.index, s.node.name, [r.label for r in tr.residuals
                                                                          if r.released_at is not None])))
    assert [(i, n) for i, n, _ in seen] == [(0, "SumBackward0"), (1, "SinBackward0"), (2, "ExpBackward0")]
    assert seen[0][2] == [] and seen[1][2] == [] and seen[2][2] == ["#1 SinBackward0.self"]


def test_hooks_do_nothing_after_backward_and_a_retained_graph_observes_again():
    a = torch.randn(5, requires_grad=True)
    y = (a.exp() * a).sum()
    first = tk.trace(y).backward(retain_graph=True)
    steps = [s.node.name for s in first.steps]
    y.backward(retain_graph=True)  # plain backward over the same nodes: the first trace is untouched
    assert [s.node.name for s in first.steps] == steps
    second = tk.trace(y).backward()
    assert [s.node.name for s in second.steps] == steps  # one step per node, no duplicates
    assert all(r.released_at is not None for r in second.residuals)
    b = torch.randn(5, requires_grad=True)
    with torch.no_grad():
        b.copy_(a)
    z = (b.exp() * b).sum()
    for _ in range(3):
        z.backward(retain_graph=True)
    assert torch.equal(a.grad, b.grad)


def test_fancy_indexing_and_stack_are_observed():
    """Saved tensor lists refuse to be read once released: that is a release, not an error."""
    x = torch.randn(6, 3, requires_grad=True)
    y = torch.stack([x[torch.tensor([0, 5])], x[torch.tensor([1, 2])]]).exp().sum()
    tr = tk.trace(y).backward()
    index_nodes = [s for s in tr.steps if s.node.name == "IndexBackward0"]
    assert len(index_nodes) == 2
    assert all([r.slot for r in s.released] == ["indices[0]"] for s in index_nodes)
    assert tr.error is None and x.grad is not None


@pytest.mark.parametrize("change", ["in-place on the output", "in-place through a view", "one of two outputs"])
def test_a_graph_changed_after_tracing_is_refused_before_backward_runs(change):
    """The hook is registered on the traced nodes when the trace is built; a node put above them
    later (an in-place op on an output) would run unheard: the trace refuses instead, and nothing
    ran (no gradient, the trace still unobserved)."""
    a = torch.randn(4, 3, requires_grad=True)
    y = a.exp() * 2
    z = a.sin().sum()
    tr = tk.trace(y, z) if change == "one of two outputs" else tk.trace(y)
    if change == "in-place through a view":
        y[0].mul_(3)  # y's node is now a CopySlices over the traced MulBackward0
    else:
        y.add_(1)
    gradient = (torch.ones_like(y), torch.ones(())) if change == "one of two outputs" else torch.ones_like(y)
    with pytest.raises(tk.NotObservableError, match="changed since it was traced"):
        tr.backward(gradient)
    assert a.grad is None and tr.steps == [] and all(r.released_at is None for r in tr.residuals)
    tk.trace(y, z).backward(gradient) if change == "one of two outputs" else tk.trace(y).backward(gradient)
    assert a.grad is not None  # traced again, the changed graph is observed


def test_two_traces_of_one_graph_observe_each_its_own_backward():
    """Two traces of one graph share its (empty) hook dict: observing one leaves the other unobserved,
    and the other observes a later backward with the same steps, each once."""
    a = torch.randn(5, requires_grad=True)
    y = (a.exp() * a).sigmoid().sum()
    first, second = tk.trace(y), tk.trace(y)
    second.backward(retain_graph=True)
    assert first.steps == [] and len(second.steps) == len(second.nodes)
    first.backward()
    assert [s.node.name for s in first.steps] == [s.node.name for s in second.steps]
    assert len(first.steps) == len(first.nodes)
    assert all(r.released_at is not None for r in first.residuals)
    assert all(r.released_at is None for r in second.residuals)  # retained: nothing released there


def _hook_calls(traces, out):
    """How many times the engine calls a hook of these traces per node in a plain backward of `out`."""
    from tracekit.internals import CURRENT_NODE

    calls = {}
    dicts = {id(d): d for tr in traces for d in tr._live.hooked()[0]}.values()
    for d in dicts:
        d[0] = lambda grad: calls.__setitem__(CURRENT_NODE(), calls.get(CURRENT_NODE(), 0) + 1)
    try:
        out.backward(retain_graph=True)
    finally:
        for d in dicts:
            d.clear()
    return sorted(calls.values())


def test_a_node_gets_one_hook_however_many_traces_reach_it():
    """A cell re-run on the same output, a trace of an output built on top (a loss over a traced
    encoder), other roots (`tk.trace(y, z)` after `tk.trace(y)`): each node keeps the one hook dict
    the first trace that reached it registered, so the user's own backward does not slow down trace
    after trace (it did: 300 traces of a 4,000-node graph made a plain backward 11x slower; 50 losses
    over one encoder 2.3x). A dict is reused while every node it hooks lives (a node's id is then its
    own); dicts are registered on runs of 1, 2, 4, ... nodes from the newest, so a rebound loss leaves
    the encoder's whole. Each trace still observes its own backward, every step once."""
    a = torch.randn(5, requires_grad=True)
    y = (a.exp() * a).sigmoid().sum()
    traces = [tk.trace(y) for _ in range(20)]
    z, w = y * 2, y + 1
    above, beside = tk.trace(z), tk.trace(w)
    losses = [tk.trace((y * 3).sum() + y) for _ in range(5)]  # new nodes on top, the old ones below
    both = [tk.trace(y, z) for _ in range(3)]
    everyone = traces + [above, beside] + losses + both
    for _ in range(10):  # a cell re-run: the loss rebound, the old one (and its top nodes) gone
        loss = (y * 4).sum()
        rerun = tk.trace(loss)
    assert _hook_calls([rerun], loss) == [1] * len(rerun.nodes)
    everyone.append(rerun)
    assert _hook_calls(everyone, z) == [1] * len(above.nodes)
    assert _hook_calls(everyone, y) == [1] * len(traces[0].nodes)
    assert {tuple(map(id, tr._live.hooked()[0])) for tr in traces} == {tuple(map(id, traces[0]._live.hooked()[0]))}
    traces[-1].backward(retain_graph=True)
    above.backward(retain_graph=True)
    losses[-1].backward(retain_graph=True)
    traces[0].backward(retain_graph=True)
    assert [s.node.name for s in traces[0].steps] == [s.node.name for s in traces[-1].steps]
    assert len(above.steps) == len(above.nodes) == len(traces[0].nodes) + 1
    assert len(losses[-1].steps) == len(losses[-1].nodes)
    assert [s.node.index for s in losses[-1].steps] == sorted({s.node.index for s in losses[-1].steps},
                                                              key=[s.node.index for s in losses[-1].steps].index)
    assert traces[0].steps[0].node.name == "SumBackward0" and above.steps[0].node.name == "MulBackward0"
    assert all(tr.steps == [] for tr in traces[1:-1])  # each observes only its own backward


def test_traces_on_two_threads_do_not_take_each_others_hooks():
    """Sequence numbers are per thread, and a freed node's id is soon another's: a node from another
    thread with the number and id of a node an earlier trace hooked (now freed) is not taken as hooked
    (an observed backward missed it: 56 of 100 runs)."""
    import threading

    x = torch.randn(3, requires_grad=True)
    keep, missed = [], []

    def graph():
        h = x * 2
        y = h
        for _ in range(4):
            y = y.exp()
        return h, y.sum()

    def first():  # traced, then only the bottom kept: its dict lives on, its other nodes go
        h, y = graph()
        tk.trace(y)
        keep.append(h)

    def second(trial):
        pad = [object() for _ in range(trial % 7)] + [[] for _ in range(trial // 7)]  # noqa: F841 - shifts ids
        _, y = graph()
        tr = tk.trace(y)
        tr.backward()
        missed.append(len(tr.nodes) - len(tr.steps))

    for trial in range(40):
        for run, args in ((first, ()), (second, (trial,))):
            worker = threading.Thread(target=run, args=args)
            worker.start()
            worker.join()
    assert missed == [0] * 40


def test_a_trace_observed_inside_another_observed_backward_takes_nothing_from_it():
    """Observing a backward of the graph from inside another trace's step callback: the inner trace does
    not take over (or clear) the outer's hook; the outer still records every step."""
    a = torch.randn(5, requires_grad=True)
    y = (a.exp() * a).sum()
    outer, inner = tk.trace(y), tk.trace(y)
    done = []

    def nested(step):
        if not done:
            done.append(step.node.name)
            inner.backward(retain_graph=True)

    outer.backward(retain_graph=True, on_step=nested)
    assert done == ["SumBackward0"] and len(inner.steps) == len(inner.nodes) == 3
    names = [s.node.name for s in outer.steps]
    assert names[-2:] == ["MulBackward0", "ExpBackward0"]  # its own last steps, after the inner backward


@pytest.mark.parametrize("without", ["the hook dict", "the hook dict and the sequence map"])
def test_walking_again_observes_the_same_backward(without):
    """Where the build could not register the hook dict (or sequence numbers repeat), the observer walks
    the graph again and finds nodes by identity: the same steps, lifetimes and gradients."""
    def observed(strip):
        torch.manual_seed(0)
        a = torch.randn(5, 3, requires_grad=True)
        h = a.exp()
        y = (h.sin() * h).sum() + a.cos().t().sum()
        del h
        tr = tk.trace(y)
        if strip:
            tr._live.hooks = None
            if without.endswith("map"):
                tr._live.index_by_seq = None
        tr.backward()
        return [s.node.name for s in tr.steps], tr.lifetimes().residuals, a.grad

    order, lifetimes, grad = observed(False)
    again = observed(True)
    assert len(order) == 8 and again[0] == order and again[1] == lifetimes and torch.equal(again[2], grad)


@pytest.mark.parametrize("retain", [False, True])
def test_each_steps_releases_are_a_tuple_of_its_nodes_residuals(retain):
    # each step's released residuals are a plain tuple of residual indexes: all the residuals of the node that
    # ran at that step, or none (none at all when the graph is retained); seen the same while backward runs
    a = torch.randn(3, requires_grad=True)
    y = (a.exp() * a.sin()).sum() + (a * 2).tanh().sum()
    tr = tk.trace(y)
    held = {n.index: tuple(r.index for r in n.residuals) for n in tr.nodes}
    during = []
    tr.backward(retain_graph=retain,
                on_step=lambda s: during.append(({r.index for r in tr.residuals if r.released_at is not None},
                                                 [tuple(r.index for r in step.released) for step in tr.steps[:-1]])))
    lifetimes = tr.lifetimes()
    assert all(type(r) is tuple for r in lifetimes.released) and len(lifetimes.released) == len(lifetimes.order)
    assert [r for r in lifetimes.released if r] == ([] if retain else [held[i] for i in lifetimes.order if held[i]])
    assert sum(map(len, lifetimes.released)) == (0 if retain else len(tr.residuals)) and len(tr.residuals) == 6
    assert during == [(set().union(*lifetimes.released[:k]), list(lifetimes.released[:k]))
                      for k in range(len(lifetimes.order))]


@pytest.mark.parametrize("build", [branching, checkpointed, chain])
def test_a_step_released_what_its_nodes_raw_slot_says_after_backward(build):
    # the observer takes a step's node to have released its values when the next step starts (the engine
    # releases them as the rule returns, before it runs the next); after backward every such node's raw slot
    # says so, and each step released exactly its node's residuals
    torch.manual_seed(0)
    a, b = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    y = build(a, b)
    tr = tk.trace(y)
    graph_nodes = tr._graph_nodes
    tr.backward()
    lifetimes = tr.lifetimes()
    checked = 0
    for k, i in enumerate(lifetimes.order):
        residuals = tr.nodes[i].residuals
        assert lifetimes.released[k] == tuple(r.index for r in residuals)
        if residuals and residuals[0].held_in == "graph":
            assert released(graph_nodes[i], [residuals[0].slot])
            checked += 1
    assert checked == {"branching": 7, "checkpointed": 1, "chain": 101}[build.__name__]


class Refuses(Twice):  # saves its input as Twice does; its rule raises
    @staticmethod
    def backward(ctx, g):
        raise ValueError("this rule refuses")


def modified_in_place():
    x = torch.randn(3, requires_grad=True)
    a = x * 2
    y = (a.sin() * a.exp()).sum()  # SinBackward0 saves a, which the caller then changes in place
    return y, lambda: a.mul_(3), RuntimeError, "modified by an inplace operation", "SinBackward0"


def custom_rule_raises():
    x = torch.randn(3, requires_grad=True)
    h = x.exp()
    y = (Refuses.apply(h) * h.sin()).sum()
    return y, lambda: None, ValueError, "this rule refuses", "RefusesBackward"


@pytest.mark.parametrize("program", [modified_in_place, custom_rule_raises])
def test_the_rule_a_backward_raised_in_keeps_its_values_and_the_rules_before_it_released_theirs(program):
    # the last step is read from its node's raw slot: its rule raised, so autograd never released its values;
    # every step before it released its node's values; PyTorch's own error comes through
    torch.manual_seed(0)
    y, change, error, message, failing = program()
    tr = tk.trace(y)
    change()
    with pytest.raises(error, match=message):
        tr.backward()
    steps = tr.steps
    assert steps[-1].node.name == failing and steps[-1].released == []
    assert all(r.released_at is None for r in steps[-1].node.residuals) and steps[-1].node.residuals
    before = [r for s in steps[:-1] for r in s.node.residuals]
    assert before and all(r.released_at == s.index for s in steps[:-1] for r in s.node.residuals)
    assert tr.error is not None and message in tr.error


class GradInside(Twice):  # saves its input as Twice does; its rule runs another backward call over traced nodes
    upstream = None  # (output, input) of that part, set by the program

    @staticmethod
    def backward(ctx, g):
        out, inp = GradInside.upstream
        torch.autograd.grad(out, inp, torch.ones_like(out), retain_graph=True)
        return g * 2


def grad_inside_a_rule():
    x = torch.randn(4, requires_grad=True)
    b = x.sin()
    GradInside.upstream = (b, x)
    return x, (GradInside.apply(b).exp()).sum(), None


def grad_inside_on_step():
    x = torch.randn(4, requires_grad=True)
    m = x.exp()
    y = (m * x).sin().sum()
    return x, y, lambda step: step.index == 2 and torch.autograd.grad(m, x, torch.ones_like(m), retain_graph=True)


@pytest.mark.parametrize("program, names, released", [
    (grad_inside_a_rule, ["SumBackward0", "ExpBackward0", "GradInsideBackward", "SinBackward0", "SinBackward0"],
     [[], ["result"], ["saved_tensors[0]"], [], ["self"]]),
    (grad_inside_on_step, ["SumBackward0", "SinBackward0", "MulBackward0", "ExpBackward0", "ExpBackward0"],
     [[], ["self"], ["self", "other"], [], ["result"]]),
])
def test_a_backward_call_inside_the_observed_one_keeps_what_it_kept(program, names, released):
    # a rule (or an on_step callback, before the rule of its step runs) calls torch.autograd.grad(retain_graph=True)
    # over traced nodes: step 3 is that other call's, which keeps its graph, so it releases nothing; the step before
    # it is read, not taken as released (its rule had not returned), and read again later: it released its values
    # at its own step once its rule returned; the observed call runs the same node again at step 4, which releases
    # its value once
    torch.manual_seed(0)
    x, y, on_step = program()
    tr = tk.trace(y)
    tr.backward(on_step=on_step)
    assert [s.node.name for s in tr.steps] == names
    assert [[r.slot for r in s.released] for s in tr.steps] == released
    assert tr.steps[3].node.index == tr.steps[4].node.index and x.grad is not None


def _readable(gnode, slot):
    """Whether a node's saved value can still be read (PyTorch raises once autograd released it)."""
    try:
        gnode.saved_tensors if slot.startswith("saved_tensors") else getattr(gnode, "_saved_" + slot)
        return True
    except RuntimeError:
        return False


def released_by_reading(tr, **backward):
    """tr.backward(), and each node's step that released its values as PyTorch's documented per-node pre-hook
    sees it without tracekit: the last run of the node before a step at whose start its first saved value can no
    longer be read (or after the last step); PyTorch's error, if backward raised."""
    nodes, slot_of = tr._graph_nodes, {}
    for r in tr.residuals:
        slot_of.setdefault(r.node.index, r.slot)
    index, seen, gone = {id(g): i for i, g in enumerate(nodes)}, [], {}

    def look(step):
        for i, slot in slot_of.items():
            if i not in gone and not _readable(nodes[i], slot):
                gone[i] = step

    handles = [g.register_prehook(lambda grads, g=g: (look(len(seen)), seen.append(index[id(g)]))[0]) for g in nodes]
    error = None
    try:
        tr.backward(**backward)
    except RuntimeError as err:
        error = str(err)
    finally:
        for h in handles:
            h.remove()
    look(len(seen))
    assert [s.node.index for s in tr.steps] == seen  # (the same steps as tracekit's)
    return {i: max(k for k, n in enumerate(seen[:at]) if n == i) for i, at in gone.items()}, error


class Nested(Twice):  # saves its input as Twice does; its rule runs a grad over the traced nodes in `inner`
    inner, retain = None, True

    @staticmethod
    def backward(ctx, g):
        out, inp = Nested.inner.pop()
        torch.autograd.grad(out, inp, torch.ones_like(out), retain_graph=Nested.retain)
        return g * 2


def nested_rule(retain):
    def program():
        Nested.retain = retain
        x = torch.randn(4, requires_grad=True)
        m = x.sin()
        Nested.inner = [(m, x)]
        return (Nested.apply(m).exp() * m).sum()
    return program


def nested_twice():  # a rule's grad runs a rule that runs another grad (and the observed call runs both again)
    x = torch.randn(4, requires_grad=True)
    m = x.cos()
    inner = Nested.apply(m).tanh()
    Nested.retain, Nested.inner = True, [(m, x), (m, x), (inner, x)]  # (popped from the end)
    return (Nested.apply(inner) * inner).sum()


def grad_in_a_tensor_hook(retain):
    def program():
        x = torch.randn(4, requires_grad=True)
        m = x.exp()
        h = m * x
        h.register_hook(lambda g: (torch.autograd.grad(m, x, torch.ones_like(m), retain_graph=retain), g)[1])
        return h.tanh().sum()
    return program


def grad_at_an_intermediate(retain):  # the inner grad takes the gradient at `a`: `a`'s node is not run there
    def program():
        Nested.retain = retain
        x = torch.randn(4, requires_grad=True)
        a = x.exp()
        b = a.sin()
        Nested.inner = [(b, a)]
        return (Nested.apply(b) * b).sum()
    return program


class ReadsOnce(Twice):  # saves its input as Twice does; its rule reads it the first time it runs only
    runs = 0

    @staticmethod
    def backward(ctx, g):
        ReadsOnce.runs += 1
        if ReadsOnce.runs == 1:
            _ = ctx.saved_tensors
        return g * 2


def released_then_run_again():  # a hook's grad (no retain_graph) runs the rule and releases it; the observed
    ReadsOnce.runs = 0          # call runs it again, which reads nothing, so PyTorch raises nothing
    x = torch.randn(4, requires_grad=True)
    m = x.sin()
    once = ReadsOnce.apply(m)
    e = once.exp()
    e.register_hook(lambda g: (torch.autograd.grad(once, m, torch.ones_like(once)), g)[1])
    return e.sum()


def last_in_two_calls():  # Nested is the last step of a hook's grad (which keeps the graph) and of the observed
    x = torch.randn(4, requires_grad=True)  # call, and its rule starts a grad both times: the observed run's release
    n = Nested.apply(x)
    k = (n + 1).sum()  # (the rule's grads run k's nodes again: they save no tensors)
    s = n.sin()
    Nested.retain, Nested.inner, hooked = True, [(k, n), (k, n)], []

    def once(g):  # (a grad inside runs s's node again: this hook too)
        if not hooked:
            hooked.append(True)
            torch.autograd.grad(n, x, torch.ones_like(n), retain_graph=True)

    s.register_hook(once)
    return s.sum() + k


def captured_then_run():  # a hook's first grad only takes the gradient at m (m's node not run); its second runs it
    x = torch.randn(4, requires_grad=True)
    m = x.exp()
    s = m.sin()
    hooked = []

    def once(g):  # (the first grad starts at s: this hook again)
        if not hooked:
            hooked.append(True)
            torch.autograd.grad(s, m, torch.ones_like(s), retain_graph=True)
            torch.autograd.grad(m, x, torch.ones_like(m), retain_graph=True)

    s.register_hook(once)
    return (s * 2).sum()


@pytest.mark.parametrize("program, again", [
    (released_then_run_again, None), (last_in_two_calls, None), (captured_then_run, None),
    (nested_rule(True), None), (nested_rule(False), "backward through the graph a second time"),
    (nested_twice, None), (grad_in_a_tensor_hook(True), None),
    (grad_in_a_tensor_hook(False), "backward through the graph a second time"),
    (grad_at_an_intermediate(True), None), (grad_at_an_intermediate(False), "backward through the graph a second"),
])
def test_each_release_is_at_the_step_pytorch_released_it_when_backward_calls_nest(program, again):
    # a grad inside a rule or a hook runs traced nodes as another backward call: a rule that starts one is still
    # running when that call's steps come, and is released at its own step once it returns; a node the inner call
    # released (no retain_graph) is released there once, and the observed call's run of it raises PyTorch's error;
    # a node whose output is the inner grad's input has its hooks called but is not run there: no step
    # (released_by_reading checks that the steps are the nodes PyTorch ran, in its order)
    torch.manual_seed(0)
    tr = tk.trace(program())
    expected, error = released_by_reading(tr)
    assert (error is None) if again is None else (again in error)
    recorded = {}
    for r in tr.residuals:
        recorded.setdefault(r.node.index, set()).add(r.released_at)
    assert recorded == {i: {expected.get(i)} for i in recorded}
    assert len(expected) >= 2 and sum(len(s.released) for s in tr.steps) == len(
        [r for r in tr.residuals if r.released_at is not None])  # each released once


@pytest.mark.parametrize("program, again, released", [
    (nested_rule(False), "backward through the graph a second time", 1),
    (grad_in_a_tensor_hook(False), "backward through the graph a second time", 1),
    (nested_rule(True), None, 0), (grad_in_a_tensor_hook(True), None, 0),
])
def test_a_kept_graph_releases_only_what_another_backward_call_released(program, again, released):
    # tr.backward(retain_graph=True) releases nothing itself; a grad a rule or hook starts without retain_graph
    # releases the nodes it runs, at their steps, and the words say so; with retain_graph there too, nothing goes
    torch.manual_seed(0)
    tr = tk.trace(program())
    expected, error = released_by_reading(tr, retain_graph=True)
    assert (error is None) if again is None else (again in error)
    recorded = {r.node.index: r.released_at for r in tr.residuals if r.released_at is not None}
    assert recorded == expected and len(recorded) == released
    words = "released only by another backward call" if released else "retain_graph: nothing released"
    # the title's lines, wrapped (where depends on the drawing's width), as text: tags and DOT's line ends as spaces
    drawn = " ".join(re.sub(r"<[^>]+>|\\[lnr]", " ", tr.draw().source).split())
    assert words in tr.text() and words in drawn
    kept = [r for r in tr.residuals if r.released_at is None]
    assert kept and all(r.held_by == RETAINED for r in kept)  # (what the kept graph holds)


@pytest.mark.slow
def test_a_compiled_backward_is_refused_with_advice():
    # compiled autograd runs the backward as one compiled graph and calls the nodes' hooks with no node running:
    # nothing to observe step by step, so a clear refusal (it was an AttributeError); the next plain backward of a
    # new trace observes as before
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    if not hasattr(compiled_autograd, "_enable"):
        pytest.skip("this torch has no compiled_autograd._enable")
    x = torch.randn(4, requires_grad=True)
    tr = tk.trace((x.exp() * x.sin()).tanh().sum())
    with pytest.raises(tk.NotObservableError, match="compiled autograd"), \
            compiled_autograd._enable(torch.compile(backend="eager")):
        tr.backward()
    assert "compiled autograd" in tr.error and tr.steps == []
    again = tk.trace((x.exp() * x.sin()).tanh().sum())
    again.backward()
    assert len(again.steps) == 5 and x.grad is not None
