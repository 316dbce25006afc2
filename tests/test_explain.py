"""Errors as evidence (issue 30): PyTorch's two lifetime errors keep their message, first and
unchanged, and gain a note naming the residual, who released or bumped it, and what each fix
costs; the costs are checked by running the fixed program."""

import contextlib
import inspect

import pytest
import torch

import tracekit as tk
from tracekit.explain import HEAD, Fix, explanation_of


def _line(marker: str) -> str:
    """`test_explain.py:N` of the line in this file holding `marker` (in a comment)."""
    lines = inspect.getsource(inspect.getmodule(_line)).split("\n")
    return f"test_explain.py:{next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith('# ' + marker))}"


def _leaves():
    torch.manual_seed(0)
    return torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)


def _error(program) -> RuntimeError:
    with pytest.raises(RuntimeError) as info:
        program()
    return info.value


def _note(err) -> str:
    notes = [n for n in getattr(err, "__notes__", []) if n.startswith(HEAD)]
    assert len(notes) == 1
    return " ".join(notes[0].split())  # unwrapped


def _twice_plain():
    x, w = _leaves()
    y = torch.tanh(x @ w).exp().sum()
    y.backward()
    y.backward()


def _twice_explained():
    x, w = _leaves()
    with tk.explain():
        y = torch.tanh(x @ w).exp().sum()  # forward-twice
        y.backward()  # first-backward
        y.backward()


def test_second_backward_names_the_residual_the_step_and_the_cost():
    plain, err = _error(_twice_plain), _error(_twice_explained)
    assert str(err) == str(plain) and str(err).startswith("Trying to backward through the graph a second time")
    note = _note(err)
    # truth: the same program traced and observed once
    x, w = _leaves()
    with tk.capture() as cap:
        y = torch.tanh(x @ w).exp().sum()
    tr = cap.trace(y).backward()
    exp = next(r for r in tr.residuals if r.node.name == "ExpBackward0")
    facts = explanation_of(err)
    assert facts.kind == "second" and facts.residual.label == exp.label == f"#{exp.node.index} ExpBackward0.result"
    shown = facts.shown
    assert (shown.shape, shown.dtype, shown.nbytes, shown.node.op) == ((3, 5), "float32", 60, "exp")
    assert shown.node.source == _line("forward-twice") and facts.earlier_line == _line("first-backward")
    assert facts.earlier_call == "backward()" and facts.released_after == exp.released_at
    # the retain_graph fix, run: what stays alive after a retained backward is what the note says it keeps
    x, w = _leaves()
    y = torch.tanh(x @ w).exp().sum()  # held: a trace holds its output weakly
    kept = tk.trace(y).backward(retain_graph=True)
    alive = sum(s.nbytes for s in kept.graph_owned_storages() if not s.expired())
    assert facts.fixes == (Fix("retain_graph", alive, 2), Fix("recompute", 0, 0))
    # the note says the same in words, after PyTorch's message
    assert f"needed {exp.label} ((3, 5) float32, 60 B), saved by `exp` at {_line('forward-twice')}" in note
    assert f"keeps {tk.format_bytes(alive)} (2 storages it freed)" in note and "recompute the forward (4 ops," in note


def test_second_autograd_grad_through_a_view():
    x, w = _leaves()
    with pytest.raises(RuntimeError) as info, tk.explain():
        h = x.exp()
        y = (h[1:] @ w).sum()  # the mm saves a view of h
        torch.autograd.grad(y, [w])
        torch.autograd.grad(y, [w])
    facts = explanation_of(info.value)
    assert facts.residual.label == "#2 MmBackward0.self" and (facts.shown.shape, facts.shown.nbytes) == ((2, 4), 32)
    # autograd.grad runs unwatched: no observed step; h is a variable of this frame, so retaining the
    # graph keeps no byte more than h already does
    assert facts.earlier_call == "torch.autograd.grad()" and facts.released_after is None
    assert facts.fixes[0] == Fix("retain_graph", 0, 0)
    assert "keeps 0 B (0 storages only the graph holds)" in _note(info.value)


def _modified(program):
    """The facts and the note of an in-place error (PyTorch's message first, unchanged)."""
    err = _error(program)
    assert str(err).startswith("one of the variables needed for gradient computation has been modified by an inplace")
    facts = explanation_of(err)
    assert facts.kind == "inplace"
    return facts, _note(err)


def test_inplace_on_an_intermediate():
    x, _ = _leaves()

    def program():
        with tk.explain():
            h = x.exp()
            loss = h.sum() * 1.0
            h.add_(1)  # bump-intermediate
            loss.backward()
    facts, note = _modified(program)
    r = facts.residual
    assert (r.label, r.shape, r.nbytes, r.node.op) == ("#0 ExpBackward0.result", (3, 4), 48, "exp")
    assert (r.saved_version, r.version) == (0, 1)
    assert [(m.call, m.source, m.version) for m in facts.mutations] == [("add_", _line("bump-intermediate"), 1)]
    assert facts.fixes == (Fix("clone", 48, 1), Fix("out-of-place", 48, 1))
    assert f"`add` instead of `add_` at {_line('bump-intermediate')}: a new 48 B allocation" in note


def test_inplace_on_an_input_twice_and_the_clone_fix_costs_what_it_says():
    x, _ = _leaves()
    a = torch.randn(3, 4)

    def program():
        with tk.explain():
            y = (x * a).sum()
            a.mul_(2)
            a.add_(1)  # second-bump
            y.backward()
    facts, note = _modified(program)
    r = facts.residual
    assert (r.label, r.shape, r.nbytes, r.version) == ("#0 MulBackward0.other", (3, 4), 48, 2)
    line = int(_line("second-bump").rsplit(":", 1)[1])
    assert [(m.call, m.source, m.version) for m in facts.mutations] == [
        ("mul_", f"test_explain.py:{line - 1}", 1), ("add_", f"test_explain.py:{line}", 2)]
    # the clone fix, run: backward works, the gradient is the saved (cloned) value, and the clone
    # is the 48 B more the note says
    b = a.clone()
    y = (x * b).sum()
    a.mul_(2)
    y.backward()
    assert torch.equal(x.grad, b) and b.untyped_storage().nbytes() == 48 and facts.fixes[0] == Fix("clone", 48, 1)
    assert "keeps 48 B more" in note


def test_inplace_through_a_view_of_an_intermediate():
    x, w = _leaves()

    def program():
        with tk.explain():
            h = torch.sigmoid(x @ w)
            loss = h.sum()
            h[0].zero_()  # view-bump
            loss.backward()
    facts, note = _modified(program)
    r = facts.residual
    assert (r.label, r.shape, r.nbytes, r.node.op) == ("#1 SigmoidBackward0.result", (3, 5), 60, "sigmoid")
    assert [(m.call, m.source) for m in facts.mutations] == [("zero_", _line("view-bump"))]
    assert "an out-of-place op instead of `zero_`" in note  # Tensor has no `zero`


def test_inplace_on_a_view_of_an_input():
    x, _ = _leaves()
    a = torch.randn(2, 4)

    def program():
        with tk.explain():
            y = (x[:2] * a[0]).sum()
            a.add_(1)  # base-bump
            y.backward()
    facts, note = _modified(program)
    r = facts.residual
    assert (r.node.name, r.slot, r.shape, r.nbytes) == ("MulBackward0", "other", (4,), 16)
    assert [(m.call, m.source) for m in facts.mutations] == [("add_", _line("base-bump"))]
    assert facts.fixes[1] == Fix("out-of-place", 32, 1)  # the out-of-place add allocates all of a


def test_after_the_fact_from_the_traceback():
    err = _error(_twice_plain)
    assert tk.explain(err) is err
    facts = explanation_of(err)
    assert facts.residual.label == "#2 ExpBackward0.result" and facts.residual.shape is None  # freed before tracing
    assert facts.earlier_call is None and facts.fixes == (Fix("retain_graph"), Fix("recompute", 0, 0))
    assert "(shape unknown (freed before tracing)), saved by `exp`" in _note(err)
    x, _ = _leaves()
    a = torch.randn(3, 4)
    y = (x * a).sum()
    a.mul_(2)
    try:
        y.backward()
    except RuntimeError as caught:
        err = tk.explain(caught)
    facts = explanation_of(err)
    assert (facts.residual.label, facts.residual.nbytes, facts.mutations) == ("#0 MulBackward0.other", 48, ())
    assert "ran unwatched" in _note(err)
    assert tk.explain(err) is err and len(err.__notes__) == 1  # explained once


def _twice_through_indexing(explained: bool):
    x, _ = _leaves()
    idx = torch.tensor([2, 0, 1])
    with tk.explain() if explained else contextlib.nullcontext():
        y = (x.exp()[idx] * 2).sum()  # forward-indexed
        y.backward()  # first-indexed
        y.backward()


def test_a_second_backward_through_indexing_is_explained_during_and_after_the_fact():
    """Indexing saves its indices as a list, which PyTorch refuses even to list once released: the
    graph is still read (the list as one released value) and the note names what backward needed."""
    err = _error(lambda: _twice_through_indexing(True))
    facts = explanation_of(err)
    assert facts.kind == "second" and facts.residual.label == "#2 MulBackward0.other"
    assert facts.shown.node.source == _line("forward-indexed") and facts.earlier_line == _line("first-indexed")
    assert "this backward needed #2 MulBackward0.other (() int64, 8 B)" in _note(err)
    err = _error(lambda: _twice_through_indexing(False))
    assert tk.explain(err) is err
    assert explanation_of(err).residual.label == "#2 MulBackward0.other"
    assert "(shape unknown (freed before tracing)), saved by `mul`" in _note(err)


def test_other_errors_and_working_programs_are_untouched():
    with pytest.raises(ValueError) as info, tk.explain():
        raise ValueError("mine")
    assert not getattr(info.value, "__notes__", None) and explanation_of(info.value) is None
    x, w = _leaves()
    (torch.tanh(x @ w) ** 2).sum().backward()
    want = x.grad.clone(), w.grad.clone()
    x, w = _leaves()
    with tk.explain():
        with tk.capture() as cap:  # capture nests inside explain
            y = (torch.tanh(x @ w) ** 2).sum()
        y.backward()
    assert torch.equal(x.grad, want[0]) and torch.equal(w.grad, want[1])
    assert cap.trace is not None and not torch.nn.modules.module._global_forward_pre_hooks


def test_a_loop_that_retains_its_graphs_frees_them_under_explain_as_without():
    """explain remembers the last graphs a backward ran on (to say which earlier backward freed what a
    second one needs) by their outputs' identity, not by holding their nodes: a loop with
    retain_graph=True (the fix explain suggests) frees each step's activations as plain PyTorch does."""
    from tracekit.storage import drop_weak_ref, weak_expired, weak_ref

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
    x = torch.randn(32, 16)

    def loop():
        refs = []
        for _ in range(12):
            h = m[1](m[0](x))
            refs.append(weak_ref(h))
            loss = m[2](h).sum()
            loss.backward(retain_graph=True)
            del loss, h
        alive = sum(not weak_expired(r) for r in refs)
        for r in refs:
            drop_weak_ref(r)
        return alive

    assert loop() == 0
    with tk.explain():
        assert loop() == 0
        y = m(x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="second time") as err:
            y.backward()  # the graph it remembers is still the one explained
    note = "".join(getattr(err.value, "__notes__", []))
    assert "AddmmBackward0.mat1" in note and "The first backward()" in note and "released it" in note
