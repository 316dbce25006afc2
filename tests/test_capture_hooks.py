"""Capture tells the build whether a value saved under it can carry a saved-tensor hook (HookWatch): a
call made under default hooks (saved_tensors_hooks, save_on_cpu, a checkpoint), pushed inside the
block or before it, or a hook pair set by hand since the capture began. Only where none can does the
build skip reading each saving node's raw slot; a value under a hook is read packed, never through
its unpack hook (a store that hands each value back once still has them all for backward)."""

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


def test_a_capture_with_no_hooks_says_none_and_each_kind_of_hook_says_some():
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    with tk.capture() as cap:
        program(x, c)
    assert cap.hooks.none()

    pack, unpack, _ = once_store()
    with tk.capture() as inside:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            program(x, c)
    assert not inside.hooks.none()

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack), tk.capture() as before:  # pushed before it began
        program(x, c)
    assert not before.hooks.none()

    with tk.capture() as offloaded:
        with torch.autograd.graph.save_on_cpu():
            program(x, c)
    assert not offloaded.hooks.none()

    with tk.capture() as checkpointed:
        checkpoint(program, x, c, use_reentrant=False)
    assert not checkpointed.hooks.none()

    with tk.capture() as by_hand:
        y = program(x, c)
    assert by_hand.hooks.none()
    y.grad_fn.next_functions[0][0]._raw_saved_result.register_hooks(lambda t: t, lambda t: t)  # after the block
    assert not by_hand.hooks.none()
    with tk.capture() as later:  # a pair set by hand before a capture began is not its concern
        program(x, c)
    assert later.hooks.none()


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
    assert cap.hooks.none()
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
    x = torch.randn(3, requires_grad=True)
    y = x.exp()  # held: a SavedTensor does not keep its node alive (one read from a freed node is freed memory)
    raw = y.grad_fn._raw_saved_result
    watch = capture.HookWatch()
    raw.register_hooks(lambda t: t, lambda t: t)
    with pytest.raises(RuntimeError, match="hooks have already been set"):
        raw.register_hooks(lambda t: t, lambda t: t)
    assert not watch.none() and capture.HookWatch().none()
