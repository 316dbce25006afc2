"""Memory by storage, observed free points, hooks that move residuals elsewhere."""

import gc
import weakref

import pytest
import torch
import torch.utils.checkpoint as checkpoint

import tracekit as tk

MIB = 1 << 20


def test_small_slice_pins_whole_allocation():
    big = torch.randn(1024, 1024) * 1  # 4 MiB, not a leaf
    big.requires_grad_(False)
    src = big.clone().requires_grad_(True)
    base = src * 1.0
    piece = base[0, :5]  # 20 visible bytes
    y = piece.exp().sin().sum()  # sin saves exp's output: a fresh 20-byte tensor
    z = (piece * 3.0).pow(2).sum()  # pow saves `piece * 3` (fresh) ...
    w = (base[0, :5] * base[1, :5]).sum()  # ... mul saves two slices of the 4 MiB base
    tr = tk.trace(w)
    (mul,) = [n for n in tr.nodes if n.name == "MulBackward0" and len(n.residuals) == 2]
    for r in mul.residuals:
        assert r.nbytes == 20
        assert r.pinned_nbytes == 4 * MIB
    (big_storage,) = [s for s in tr.storages if s.nbytes == 4 * MIB]
    assert len(big_storage.residuals) == 2  # two views, one allocation, counted once
    others = [s for s in tr.storages if s is not big_storage]
    assert [s.nbytes for s in others] == [8]  # `src * 1.0` saved the scalar as a float64 tensor
    assert tr.saved_bytes == 4 * MIB + 8
    assert tr.visible_bytes == 40 + 8
    assert tr.saved_bytes_by_device == {"cpu": 4 * MIB + 8}
    assert "20 B" in tr.text() and "4.0 MiB" in tr.text()
    del y, z


def test_views_of_one_storage_count_once_and_fresh_tensors_separately():
    a = torch.randn(8, 8, requires_grad=True)
    h = a * 2  # 256 bytes
    y = (h[:4] * h[4:]).sum() + h.t().exp().sum()
    tr = tk.trace(y)
    h_key = (str(h.device), h.untyped_storage().data_ptr())
    shared = [s for s in tr.storages if s.key == h_key]
    assert len(shared) == 1 and len(shared[0].residuals) == 2
    exp_result = [r for r in tr.residuals if r.slot == "result"][0]
    assert exp_result.storage is not shared[0]
    assert tr.saved_bytes == sum(s.nbytes for s in tr.storages) == 256 + 256 + 8  # h, exp's result, the scalar 2
    assert tr.visible_bytes == 128 + 128 + 256 + 8


def test_neuron_backward_observes_order_release_and_holders():
    x = torch.tensor(1.0, requires_grad=True)
    w = torch.tensor(2.0, requires_grad=True)
    with tk.capture() as cap:
        y = torch.sigmoid(w * x - 0.5)
    tr = cap.trace(y)
    assert tr.backward() is tr
    assert [s.node.name for s in tr.steps] == ["SigmoidBackward0", "SubBackward0", "MulBackward0"]
    assert [[r.slot for r in s.used] for s in tr.steps] == [["result"], [], ["self", "other"]]
    assert [[r.slot for r in s.released] for s in tr.steps] == [["result"], [], ["self", "other"]]
    by_slot = {r.slot: r for r in tr.residuals}
    assert by_slot["result"].released_at == 0 and by_slot["self"].released_at == 2
    # nothing is actually freed: y, w and x are all alive in this function
    assert all(s.freed == [] for s in tr.steps)
    assert by_slot["self"].held_by == "input leaf w"
    assert by_slot["other"].held_by == "input leaf x"
    assert by_slot["result"].held_by == "output y (a live tensor)"
    assert abs(x.grad.item() - 0.2983) < 1e-4 and abs(w.grad.item() - 0.1491) < 1e-4
    assert "released after step 2; held by input leaf w" in tr.text()


def test_intermediate_storage_freed_at_its_step():
    a = torch.randn(1000, requires_grad=True)
    y = a.exp().sin().sum()  # exp's result is saved by exp (result) and sin (self)
    tr = tk.trace(y)
    tr.backward()
    names = [s.node.name for s in tr.steps]
    assert names == ["SumBackward0", "SinBackward0", "ExpBackward0"]
    sin_self = tr.nodes[1].residuals[0]
    exp_result = tr.nodes[0].residuals[0]
    assert sin_self.storage == exp_result.storage  # views of one storage row
    assert sin_self.released_at == 1 and exp_result.released_at == 2
    assert sin_self.freed_at == exp_result.freed_at == 2  # memory goes only when the last holder lets go
    assert tr.steps[2].freed == [exp_result.storage] and exp_result.storage.nbytes == 4000
    assert exp_result.held_by is None


def test_parameter_held_past_backward():
    model = torch.nn.Linear(16, 4)
    inp = torch.randn(8, 16)
    loss = model(inp).relu().sum()
    tr = tk.trace(loss)
    addmm = next(n for n in tr.nodes if n.name == "AddmmBackward0")
    # the input needs no grad, so PyTorch saves only mat1 (for the weight's gradient)
    assert [r.slot for r in addmm.residuals] == ["mat1"]
    tr.backward()
    (mat1,) = addmm.residuals
    assert mat1.role == "constant inp" and mat1.released_at == 2
    assert mat1.held_by == "user variable inp" and mat1.freed_at is None
    assert tr.nodes[0].name == "TBackward0" and tr.nodes[0].inputs == ("model.weight",)

    inp.requires_grad_(True)  # now the weight (as a transposed view) is saved too
    loss = model(inp).sum()  # the trace holds its output weakly: keep it to run backward
    tr = tk.trace(loss)
    addmm = next(n for n in tr.nodes if n.name == "AddmmBackward0")
    mat2 = next(r for r in addmm.residuals if r.slot == "mat2")
    assert mat2.role == "output of #0 TBackward0" and mat2.shape == (16, 4)
    tr.backward()
    assert mat2.held_by == "parameter model.weight"  # the view shares the parameter's storage
    assert mat2.freed_at is None and mat2.storage.nbytes == 16 * 4 * 4


def test_retain_graph_releases_nothing_and_second_backward_works():
    a = torch.randn(5, requires_grad=True)
    y = (a.exp() * a).sum()
    tr = tk.trace(y)
    tr.backward(retain_graph=True)
    assert tr.retained is True
    assert all(s.released == [] and s.freed == [] for s in tr.steps)
    assert all(r.status == "live" and r.held_by == "the retained graph (retain_graph=True)" for r in tr.residuals)
    assert "retain_graph: nothing released" in tr.text()
    first = a.grad.clone()
    tr2 = tk.trace(y).backward()
    assert torch.equal(a.grad, 2 * first)
    assert all(r.released_at is not None for r in tr2.residuals)


def test_checkpointed_residuals_are_recomputed_not_pinned():
    a = torch.randn(256, requires_grad=True)
    h = checkpoint.checkpoint(lambda v: v.sin().cos(), a, use_reentrant=False)
    y = (h * 2).sum()
    tr = tk.trace(y)
    inside = [n for n in tr.nodes if n.op in ("sin", "cos")]
    recomputed = [r for n in inside for r in n.residuals if not r.slot.startswith("checkpoint ")]
    assert recomputed and all(r.held_in.startswith("recomputed") and r.storage is None for r in recomputed)
    # what the checkpoint keeps to rerun the region: its input a, on the region's first node (issue 38)
    (kept,) = [r for n in inside for r in n.residuals if r.slot.startswith("checkpoint ")]
    assert (kept.slot, kept.held_in, kept.node.op, kept.from_name) == ("checkpoint args[0]", "kept by checkpoint to "
                                                                       "recompute", "sin", "a")
    assert tr.saved_bytes == 8 + a.untyped_storage().nbytes()  # the scalar 2 kept by the outer mul, and a
    tr.backward()
    ref = torch.randn(256)
    assert a.grad.shape == ref.shape


def test_offloaded_residuals_live_on_host():
    a = torch.randn(64, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        y = (a.sin() * a).sum()
    tr = tk.trace(y)
    assert tr.residuals and all(r.held_in == "host (save_on_cpu)" for r in tr.residuals)
    assert all(r.device == "cpu" for r in tr.residuals)
    assert tr.saved_bytes_by_device == {"cpu": 256 + 256}  # sin's input a and its output, same a shared
    tr.backward()
    assert torch.allclose(a.grad, a.detach().sin() + a.detach() * a.detach().cos())


def test_custom_hook_residuals_are_named():
    def pack(t):
        return ("packed", t.clone())

    def unpack(p):
        return p[1]

    a = torch.randn(4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = a.exp().sum()
    tr = tk.trace(y)
    (r,) = tr.residuals
    assert r.held_in == "custom saved-tensor hook test_custom_hook_residuals_are_named.<locals>.unpack"
    assert r.shape == (4,) and r.storage.nbytes == 16


def _mul_chain(n: int, factor: float) -> tuple[tk.Trace, torch.Tensor]:
    """The trace of x * factor * factor ... (n multiplications), summed: a graph n + 1 nodes deep
    (and its output: the trace holds it weakly)."""
    x = torch.randn(4, requires_grad=True)
    v = x
    for _ in range(n):
        v = v * factor
    y = v.sum()
    return tk.trace(y), y


def test_deep_graph_traces_without_recursion():
    tr, y = _mul_chain(5000, 1.001)
    assert len(tr.nodes) == 5001
    tr.backward()
    assert len(tr.steps) == 5001
    g = tr.draw(max_nodes=40)
    assert "showing 40 of 5001 nodes; 4961 collapsed (mul ×4961" in g.source
    assert g.source.count("->") < 300


@pytest.mark.slow
def test_hundred_thousand_node_graph_traces_and_backwards():
    tr, y = _mul_chain(100_000, 1.0001)
    assert len(tr.nodes) == 100_001 and len(tr.residuals) == 100_000
    tr.backward()
    assert len(tr.steps) == 100_001
    assert tr.steps[-1].node.index == 0
    assert "showing 60 of 100001 nodes" in tr.draw().source


DEEP_TEARDOWN = """
import gc, torch, tracekit as tk
from tracekit import keeper

def build():
    v = torch.randn(4, requires_grad=True)
    for _ in range(100_000):
        v = v * 1.0001
    return v

def trace_then_drop_output():
    v = build()
    tr = tk.trace(v.sum())
    del tr          # the trace goes first ...
    return None     # ... then the 100k-deep graph, which PyTorch 2.13 frees recursively

trace_then_drop_output()
gc.collect()
print("pending after drop:", keeper.pending())

def trace_again_and_from_above_then_drop():
    v = build()
    y = v.sum()
    for out in (y, y, y * 2):  # a cell run again, and a trace of an output built on top
        tk.trace(out)
    return None

trace_again_and_from_above_then_drop()
gc.collect()
print("pending after the retraced graph's drop:", keeper.pending())
KEPT = build()      # a module global still holding a walked deep graph at exit
tk.trace(KEPT.sum())
print("done")
"""


@pytest.mark.slow
def test_deep_walked_graph_frees_without_crashing(tmp_path):
    script = tmp_path / "deep.py"
    script.write_text(DEEP_TEARDOWN)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pending after drop: 0" in done.stdout and "done" in done.stdout
    assert "pending after the retraced graph's drop: 0" in done.stdout


def test_a_deep_graph_traced_again_is_freed_when_dropped():
    """Each trace of a deep graph keeps every SPACING-th node until it is safe to free; traced twice (a
    cell run again) or from an output built on top, the kept nodes used to hold each other forever (a
    node two chains held was never the last holder): the graph and its saved values leaked."""
    from tracekit import keeper
    from tracekit.storage import drop_weak_ref, weak_expired, weak_ref

    for traces in (1, 2, 3):
        w = torch.randn(64, requires_grad=True)
        v = torch.randn(64, requires_grad=True) * 1.0
        first = weak_ref(v)  # the first intermediate: saved by the first mul (w needs its gradient)
        for _ in range(keeper.DEEP + 500):
            v = v * w
        y = v.sum()
        for out in [y] * traces + [y * 2]:
            tk.trace(out, progress=False)
        assert not weak_expired(first)
        del v, y, out
        gc.collect()
        assert keeper.pending() == 0, traces
        assert weak_expired(first), traces  # the graph, and what it saved, are gone
        drop_weak_ref(first)


def test_tracing_inside_a_function_does_not_extend_lifetimes():
    """Reading a function's locals for names must not keep its tensors alive after `del`."""

    def body():
        a = torch.randn(256, requires_grad=True)
        y = (a.exp() * a).sum()
        tr = tk.trace(y)
        (exp_storage,) = tr.graph_owned_storages()
        del tr, y
        return exp_storage.expired()

    assert body() is True


def test_measured_graph_bytes_match_the_trace():
    a = torch.randn(1000, requires_grad=True)
    with tk.measure("cpu") as probe:
        y = (a.exp() * a.sin()).sum()
        probe.mark("after forward")
        tr = tk.trace(y)
        predicted = sum(s.nbytes for s in tr.graph_owned_storages()) + y.nbytes
        del tr, y
        probe.mark("after drop")
    m = probe.result
    # exp keeps its result, mul keeps exp's result (shared) and sin's result; sin keeps a (a leaf,
    # not the graph's to free); plus the 4-byte output
    assert predicted == 2 * 4000 + 4
    assert m.marks["after forward"] == predicted
    assert m.marks["after drop"] == 0


def test_a_deep_traced_graph_goes_when_its_output_does_not_at_the_next_collection():
    """`del y` on a traced deep graph frees it (and its saved values) as plain PyTorch does, within a
    moment, with the cycle collector off: the kept nodes are let go when the output goes, not only
    when a collection runs (a loop making such graphs held two at a time; with gc off, for ever)."""
    import time

    from tracekit import keeper
    from tracekit.storage import drop_weak_ref, weak_expired, weak_ref

    gc.disable()
    try:
        for traces in (1, 2):
            x = torch.randn(1, requires_grad=True)
            big = torch.randn(1_000_000)
            y = (x * big).sum()  # saves big
            ref = weak_ref(big)
            del big
            for _ in range(keeper.DEEP + 500):
                y = y * 1.0001
            for _ in range(traces):
                tk.trace(y, progress=False)
            del y
            waited = time.monotonic()
            while not weak_expired(ref) and time.monotonic() - waited < 30:  # (a loaded machine: seconds)
                time.sleep(0.01)
            assert weak_expired(ref) and keeper.pending() == 0, traces
            drop_weak_ref(ref)
    finally:
        gc.enable()


def test_every_value_a_node_saved_under_hooks_is_read_packed_and_none_is_unpacked():
    """A node's values are all packed under the hooks active when it was made: the build reads one
    raw slot per node to tell, and reads none of them through the user's unpack hook."""
    unpacked = []

    def unpack(p):
        unpacked.append(p)
        return p[1]

    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    before = (a * b).tanh()  # saved plainly: read as values
    with torch.autograd.graph.saved_tensors_hooks(lambda t: ("packed", t), unpack):
        y = (before * b * a).sum()  # two MulBackward0, each saving both its inputs under the hooks
    tr = tk.trace(y)
    held = {(r.node.name, r.slot, r.node.index): r.held_in for r in tr.residuals}
    hooked = {k: v for k, v in held.items() if v.startswith("custom saved-tensor hook")}
    assert sorted((name, slot) for name, slot, _ in hooked) == [("MulBackward0", "other"), ("MulBackward0", "other"),
                                                              ("MulBackward0", "self"), ("MulBackward0", "self")]
    assert {v for k, v in held.items() if k not in hooked} == {"graph"}  # the first mul and the tanh: plain
    assert unpacked == []
    tr.backward()
    assert len(unpacked) == 4  # backward unpacks each once


def test_a_node_whose_first_slot_is_empty_still_reads_its_hooked_values_packed():
    """x * c with c a constant saves only `other`: the empty `self` slot is an empty SavedTensor that no
    hook packed, so it cannot tell whether the node's values carry hooks; the saved one does."""
    unpacked = []
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: ("packed", t), lambda p: unpacked.append(p) or p[1]):
        y = (x * c).sum()
    tr = tk.trace(y)
    assert [(r.node.name, r.slot, r.held_in.startswith("custom saved-tensor hook")) for r in tr.residuals] == [
        ("MulBackward0", "other", True)]
    assert unpacked == []  # read packed, not through the user's unpack hook
    tr.backward()
    assert len(unpacked) == 1 and torch.equal(x.grad, c)


def test_a_hook_set_by_hand_on_a_nodes_first_value_is_seen_whatever_nodes_like_it_held():
    """A layer norm with no bias saves its first value in `input`; one with a constant bias, the same
    type with the same inputs that get a gradient, saves `bias` first. A hook set by hand on that
    `bias` is seen (the value read packed, not through the hook), whatever the node before it held:
    the slots are read in order up to the first that holds a value, with no shortcut learnt from
    another node (an earlier build read the learnt slot first and ran this hook)."""
    import torch.nn.functional as F

    x, bias = torch.randn(2, 3, requires_grad=True), torch.randn(3)
    h = F.layer_norm(x, (3,))  # no bias: its first value is `input`
    y = F.layer_norm(h, (3,), None, bias)  # a constant bias: `bias` is its first value
    store: dict[int, torch.Tensor] = {}

    def pack(t):
        store[0] = t
        return 0

    y.grad_fn._raw_saved_bias.register_hooks(pack, store.pop)  # handed back once
    tr = tk.trace(y.sum())
    assert [r.held_in for r in tr.residuals if r.slot == "bias"] == ["custom saved-tensor hook dict.pop"]
    assert len(store) == 1  # not unpacked by the trace
    tr.backward()
    assert store == {} and x.grad is not None


def test_products_with_constants_under_hooks_after_plain_ones_are_read_packed():
    """x * c saves only `other`: after a plain one, two made under hooks in the same graph are read
    packed (a store that hands each value back once still has them all for backward)."""
    x, c, d = torch.randn(3, requires_grad=True), torch.randn(3), torch.randn(3)
    store: dict[int, torch.Tensor] = {}

    def pack(t):
        store[len(store)] = t
        return len(store) - 1

    plain = x * c
    with torch.autograd.graph.saved_tensors_hooks(pack, store.pop):  # each value handed back once
        y = (plain * d * c).sum()
    tr = tk.trace(y)
    assert [(r.node.name, r.slot, r.held_in) for r in tr.residuals] == [
        ("MulBackward0", "other", "graph")] + [("MulBackward0", "other", "custom saved-tensor hook dict.pop")] * 2
    assert len(store) == 2  # nothing unpacked by the trace
    tr.backward()
    assert store == {} and torch.equal(x.grad, c * d * c)


def test_a_checkpointed_product_with_a_constant_is_recomputed_and_not_run_again_by_the_trace():
    from torch.utils.checkpoint import checkpoint

    runs = []
    x, mask = torch.randn(3, requires_grad=True), (torch.arange(3) != 1).float()

    def region(t):
        runs.append(1)
        return (t * mask).sin()

    y = checkpoint(region, x, use_reentrant=False).sum()
    tr = tk.trace(y)
    assert len(runs) == 1  # the trace read the region's saved values without recomputing them
    held = {(r.node.name, r.slot): r.held_in for r in tr.residuals}
    assert held[("MulBackward0", "other")] == held[("SinBackward0", "self")] == "recomputed in backward (checkpoint)"
    tr.backward()
    assert len(runs) == 2 and torch.equal(x.grad, (x * mask).cos().detach() * mask)


def test_a_loop_of_traces_leaves_the_collectors_schedule_alone():
    """Cycles alive while a trace is built and garbage just after (a loop's temporaries) are collected on
    the collector's own schedule: a trace moves nothing to the oldest generation and resets no count
    (a build that froze and unfroze everything to skip the young collections left all 600 alive)."""
    class Cycle:
        def __init__(self) -> None:
            self.me = self
            self.pad = [0.0] * 64

    def loop(x: torch.Tensor) -> list[weakref.ref]:
        refs = []
        for _ in range(600):
            cycle = Cycle()  # alive during the trace, garbage at the next iteration
            refs.append(weakref.ref(cycle))
            tk.trace((x * 2.0).exp().sum())
        return refs

    gc.collect()
    refs = loop(torch.randn(8, requires_grad=True))
    alive = sum(r() is not None for r in refs)
    assert alive < 300, alive
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def _deep_traced_output() -> tuple[torch.Tensor, int]:
    """(the output of a traced graph deep enough for the keeper to hold it, a weak reference to the
    storage of a value only that graph holds: expired once the graph is freed)."""
    from tracekit import keeper
    from tracekit.storage import weak_ref

    x, big = torch.randn(1, requires_grad=True), torch.randn(100_000)
    y = (x * big).sum()
    ref = weak_ref(big)
    del big
    for _ in range(keeper.DEEP + 500):
        y = y * 1.0001
    tk.trace(y, progress=False)
    return y, ref


def _freed_within(ref: int, seconds: float) -> bool:
    import time

    from tracekit.storage import weak_expired

    waited = time.monotonic()
    while not weak_expired(ref) and time.monotonic() - waited < seconds:
        time.sleep(0.005)
    return weak_expired(ref)


def test_an_output_that_goes_while_another_outputs_sweep_runs_is_swept_after_it(monkeypatch):
    """`del y` while the sweep another traced output started is still running, after that sweep has
    looked at y's graph (still held by y then): y's graph is swept again after it, not left to a
    collection that, with the collector off, never comes."""
    import threading

    from tracekit import keeper
    from tracekit.storage import drop_weak_ref

    looked, go = threading.Event(), threading.Event()
    release = keeper._release

    def release_then_hold_on() -> None:  # the running sweep: it has looked, and has not returned yet
        release()
        if not looked.is_set():
            looked.set()
            go.wait(10)

    gc.disable()
    try:
        y, ref = _deep_traced_output()
        monkeypatch.setattr(keeper, "_SWEEPS", (0.01,))  # one sweep per batch: no later sweep to fall back on
        monkeypatch.setattr(keeper, "_release", release_then_hold_on)
        keeper._sweep_soon()  # another output went: its sweep looks at y's graph while y holds it
        assert looked.wait(10)
        del y  # while that sweep still runs
        go.set()
        assert _freed_within(ref, 5) and keeper.pending() == 0
        drop_weak_ref(ref)
    finally:
        go.set()
        gc.enable()


def test_a_sweep_that_comes_before_the_output_let_go_is_made_good_by_a_later_one(monkeypatch):
    """The sweep `del y` starts can come while y's graph is still held (on a loaded machine the thread
    freeing y can pause between telling the keeper and letting go of its node; here another holder of
    the top node lets go just after the first sweep): a later sweep, a moment after, frees it, with the
    collector off."""
    import threading

    from tracekit import keeper
    from tracekit.storage import drop_weak_ref

    swept = threading.Event()
    release = keeper._release

    def release_and_tell() -> None:
        release()
        swept.set()

    gc.disable()
    try:
        y, ref = _deep_traced_output()
        top = y.grad_fn
        monkeypatch.setattr(keeper, "_release", release_and_tell)
        del y  # its sweep finds the top still held (by `top`)
        assert swept.wait(10)
        del top  # now nothing holds the graph
        assert _freed_within(ref, 5) and keeper.pending() == 0
        drop_weak_ref(ref)
    finally:
        gc.enable()


def test_an_output_that_goes_while_the_sweeps_wait_for_a_kept_graph_is_swept_at_once(monkeypatch):
    """While another traced deep graph stays (its output kept), the sweeping thread waits between its
    later sweeps: an output that goes meanwhile is swept a moment after, not at the next of them."""
    from tracekit import keeper
    from tracekit.storage import drop_weak_ref

    monkeypatch.setattr(keeper, "_SWEEPS", (0.01, 60.0))  # the later sweep: a minute off
    gc.disable()
    try:
        kept, kept_ref = _deep_traced_output()
        y, ref = _deep_traced_output()
        first, first_ref = _deep_traced_output()
        del first  # its batch: one sweep, then the wait (the kept graph is left)
        assert _freed_within(first_ref, 5)
        del y
        assert _freed_within(ref, 5)
        del kept
        assert _freed_within(kept_ref, 5) and keeper.pending() == 0
        for r in (ref, first_ref, kept_ref):
            drop_weak_ref(r)
    finally:
        gc.enable()


def test_a_sweep_that_raises_ends_its_thread_and_the_next_output_is_still_swept(monkeypatch):
    """A sweep raising in the keeper's thread (it ends, its error told by threading) leaves no state that
    stops the next traced output's sweep: with the collector off, that output's graph (and the one whose
    sweep raised) are still freed."""
    import threading

    from tracekit import keeper
    from tracekit.storage import drop_weak_ref

    raised = threading.Event()
    release = keeper._release

    def raise_once() -> None:
        if not raised.is_set():
            raised.set()
            raise RuntimeError("a sweep that fails")
        release()

    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # (the thread's error, told nowhere here)
    gc.disable()
    try:
        y1, ref1 = _deep_traced_output()
        y2, ref2 = _deep_traced_output()
        monkeypatch.setattr(keeper, "_release", raise_once)
        del y1
        assert raised.wait(10)
        del y2
        assert _freed_within(ref2, 5) and _freed_within(ref1, 5) and keeper.pending() == 0
        drop_weak_ref(ref1)
        drop_weak_ref(ref2)
    finally:
        gc.enable()


def test_the_process_exits_when_the_keepers_thread_was_sweeping_as_it_ended(tmp_path):
    """At exit the keeper's thread can be stopped for good in the middle of a sweep, holding its lock, while
    a traced deep output still lives (a module global): the collection at exit must not wait for that lock."""
    import subprocess
    import sys

    script = tmp_path / "exits.py"
    script.write_text(
        "import atexit, time\n"
        "def at_exit():  # runs after the keeper's own at-exit sweep (registered first: last)\n"
        "    from tracekit import keeper\n"
        "    release = keeper._release\n"
        "    def slow():  # the keeper's thread, inside a sweep, when the interpreter stops it\n"
        "        time.sleep(0.5)\n"
        "        release()\n"
        "    keeper._release = slow\n"
        "    keeper._sweep_soon()\n"
        "    time.sleep(0.1)\n"
        "atexit.register(at_exit)\n"
        "import torch, tracekit as tk\n"
        "from tracekit import keeper\n"
        "x = torch.randn(1, requires_grad=True)\n"
        "A = x * 1.0\n"
        "for _ in range(keeper.DEEP + 10):\n"
        "    A = A * 1.0001\n"
        "tk.trace(A, progress=False)  # A lives on: kept nodes at exit\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
