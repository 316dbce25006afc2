"""Capture tells the build whether a value saved under it can carry a saved-tensor hook (HookWatch): none
until a hook pair is pushed (saved_tensors_hooks, save_on_cpu, a checkpoint) or set by hand anywhere
in the process. Only where none can does the build skip reading each saving node's raw slot; a value
under a hook is read packed, never through its unpack hook (a store that hands each value back once
still has them all for backward)."""

import importlib

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import tracekit as tk

build = importlib.import_module("tracekit.build")
capture = importlib.import_module("tracekit.capture")


def once_store():
    """(pack, unpack, store): unpack hands each value back once (a second read raises KeyError)."""
    store: dict[int, torch.Tensor] = {}

    def pack(t):
        store[len(store)] = t
        return len(store) - 1

    return pack, store.pop, store


def program(x, c):
    return ((x * c).exp() * x).tanh().sum()


SAYS = """
import torch, tracekit as tk
x, c = torch.randn(3, requires_grad=True), torch.randn(3)
def program():
    return ((x * c).exp() * x).tanh().sum()
def said(run):
    with tk.capture() as cap:
        run()
    return cap.hooks.none()
out = [said(program)]
kind = %r
if kind == "saved_tensors_hooks":
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        program()
out.append(said(program))  # outside any hook, after one was used (here, not even under a capture)
print(out)
"""


@pytest.mark.slow
def test_a_capture_says_none_until_a_hook_is_used_anywhere_in_the_process():
    """In a new process: a capture with no hook in sight says none; once a hook pair was pushed (here
    outside any capture), every capture after says some. (In this process some test has used hooks.)"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SAYS % "saved_tensors_hooks"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == str([True, False])


@pytest.mark.parametrize("kind", ["saved_tensors_hooks", "save_on_cpu", "checkpoint", "by hand"])
def test_each_kind_of_hook_is_counted(kind):
    from tracekit.internals import count_saved_hooks

    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    before = count_saved_hooks()
    if kind == "saved_tensors_hooks":
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            program(x, c)
    elif kind == "save_on_cpu":
        with torch.autograd.graph.save_on_cpu():
            program(x, c)
    elif kind == "checkpoint":
        checkpoint(program, x, c, use_reentrant=False)
    else:
        y = program(x, c)
        y.grad_fn.next_functions[0][0]._raw_saved_result.register_hooks(lambda t: t, lambda t: t)
    assert count_saved_hooks() > before
    with tk.capture() as cap:
        program(x, c)
    assert not cap.hooks.none()


@pytest.mark.parametrize("where", ["inside the block", "before the block", "by hand after the block",
                                   "by hand inside the block"])
def test_a_value_under_a_hook_is_read_packed_under_capture(where):
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    expected = torch.autograd.grad(program(x, c), x)[0]
    pack, unpack, store = once_store()
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
    if where == "before the block":
        with hooks, tk.capture() as cap:
            y = program(x, c)
    elif where == "inside the block":
        with tk.capture() as cap, hooks:
            y = program(x, c)
    else:
        with tk.capture() as cap:
            y = program(x, c)
            if where == "by hand inside the block":
                y.grad_fn.next_functions[0][0]._raw_saved_result.register_hooks(pack, unpack)  # TanhBackward0's
        if where == "by hand after the block":
            y.grad_fn.next_functions[0][0]._raw_saved_result.register_hooks(pack, unpack)
    held = dict(store)
    tr = cap.trace(y)
    assert store == held  # nothing unpacked by the trace
    hooked = [r for r in tr.residuals if r.hook is not None]
    assert hooked and all("once_store.<locals>" in r.held_in or "dict.pop" in r.held_in for r in hooked)
    if where.startswith("by hand"):
        assert [(r.node.name, r.slot) for r in hooked] == [("TanhBackward0", "result")]
    else:
        assert len(hooked) == len(tr.residuals) == 5  # c, exp's result, its product's two factors, tanh's result
    tr.backward()
    assert store == {} and torch.equal(x.grad, expected)


def test_where_none_can_the_build_skips_the_probe_and_reads_the_same_record():
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    with tk.capture() as cap:
        y = program(x, c)
    traced = [capture._trace_recorded((y,), cap.sources, cap.mutations, cap.modules, False, True, unhooked)
              for unhooked in (True, False)]
    assert traced[0].to_json() == traced[1].to_json()
    assert [r.node.source for r in traced[0].residuals] == ["test_capture_hooks.py:31"] * 5


def test_the_flag_is_what_skips_the_probe():
    """Told wrongly that no hook can be there, the build reads the hooked value through its hook (what
    the probe prevents): the flag, not something else, decides whether raw slots are read."""
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    with tk.capture() as cap:
        y = program(x, c)
    unpacked = []
    y.grad_fn.next_functions[0][0]._raw_saved_result.register_hooks(lambda t: t, lambda t: unpacked.append(1) or t)
    told = capture._trace_recorded((y,), cap.sources, cap.mutations, cap.modules, False, True, True)
    assert unpacked == [1] and [r.hook for r in told.residuals] == [None] * 5
    assert not cap.hooks.none()
    right = cap.trace(y)
    assert unpacked == [1] and [r.node.name for r in right.residuals if r.hook is not None] == ["TanhBackward0"]


def test_a_hook_set_by_hand_counts_and_pytorchs_own_error_is_unchanged():
    from tracekit.internals import count_saved_hooks

    x = torch.randn(3, requires_grad=True)
    y = x.exp()  # held: a SavedTensor does not keep its node alive (one read from a freed node is freed memory)
    raw = y.grad_fn._raw_saved_result
    before = count_saved_hooks()
    raw.register_hooks(lambda t: t, lambda t: t)
    with pytest.raises(RuntimeError, match="hooks have already been set"):
        raw.register_hooks(lambda t: t, lambda t: t)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        pass
    assert count_saved_hooks() == before + 3


def _read_packed(cap, y, unpacked):
    """cap.trace(y) runs no unpack hook, and backward (through a store that hands each value back once)
    still finds every value."""
    unpacked.clear()
    cap.trace(y)
    assert unpacked == []
    y.backward()


class _Offloaded(torch.Tensor):
    """A subclass whose __torch_function__ runs each call under saved-tensor hooks (pushed and popped
    inside the call capture records)."""

    hooks = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch.autograd.graph.saved_tensors_hooks(*cls.hooks):
            return super().__torch_function__(func, types, args, kwargs or {})


class _OffloadMode(torch.overrides.TorchFunctionMode):
    def __init__(self, hooks):
        super().__init__()
        self.hooks = hooks

    def __torch_function__(self, func, types, args=(), kwargs=None):
        with torch.autograd.graph.saved_tensors_hooks(*self.hooks):
            return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("where", ["a subclass's __torch_function__", "a mode below the capture's",
                                   "a gradient hook inside grad(create_graph=True)"])
def test_hooks_pushed_and_popped_inside_one_recorded_call_are_read_packed(where):
    pack, unpack, _ = once_store()
    unpacked = []

    def counted(key):
        unpacked.append(key)
        return unpack(key)

    x = torch.randn(4, requires_grad=True)
    if where.startswith("a subclass"):
        _Offloaded.hooks = (pack, counted)
        xs = torch.randn(4).as_subclass(_Offloaded).requires_grad_()
        with tk.capture() as cap:
            y = (xs * xs).sin().sum()
    elif where.startswith("a mode"):
        with _OffloadMode((pack, counted)), tk.capture() as cap:
            y = (x * x).sin().sum()
    else:
        def on_grad(g):
            with torch.autograd.graph.saved_tensors_hooks(pack, counted):
                return (g * g).sin()

        with tk.capture() as cap:
            h = x * x
            h.register_hook(on_grad)
            (gx,) = torch.autograd.grad(h.sin().sum(), x, create_graph=True)
            y = gx.sum()
    assert not cap.hooks.none()
    _read_packed(cap, y, unpacked)


BEGUN_ELSEWHERE = """
import threading, torch, tracekit as tk
store, unpacked = {}, []
def pack(t):
    store[len(store)] = t
    return len(store) - 1
def unpack(k):
    unpacked.append(k)
    return store.pop(k)
x = torch.randn(4, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):  # the main thread's first nodes: numbers 0, 1, ...
    h = x
    for _ in range(3):
        h = (h * h).sin()
made = {}
def go_on():  # a new thread's calls take the numbers 0, 1, ... again
    with tk.capture() as cap:
        y = h
        for _ in range(10):
            y = (y * 2).cos()
        y = y.sum()
    made.update(cap=cap, y=y)
thread = threading.Thread(target=go_on)
thread.start()
thread.join()
made["cap"].trace(made["y"])
print(len(unpacked))
made["y"].backward()
print(store == {} and x.grad is not None)
"""


@pytest.mark.slow
def test_a_graph_begun_on_another_thread_under_hooks_is_read_packed():
    """Sequence numbers are per thread: in a new process the main thread's first nodes have the numbers the
    capture's calls take on a new thread. Two nodes with one number: the build probes."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BEGUN_ELSEWHERE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "True"]


def test_one_capture_entered_on_two_threads_sees_the_hooks_of_each():
    import threading

    pack, unpack, _ = once_store()
    unpacked = []
    x = torch.randn(8, requires_grad=True)
    cap, made = tk.capture(), {}

    def warm_up():
        with cap:
            h = x
            for _ in range(20):
                h = h * 2

    def step():  # its calls take the numbers warm_up's took, on another thread
        with cap, torch.autograd.graph.saved_tensors_hooks(pack, lambda k: unpacked.append(k) or unpack(k)):
            h = x
            for _ in range(4):
                h = (h * h).sin()
        made["y"] = h.sum()

    for fn in (warm_up, step):
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()
    assert len(cap.threads) == 2 and not cap.hooks.none()
    _read_packed(cap, made["y"], unpacked)
