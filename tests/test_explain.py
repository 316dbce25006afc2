"""Errors as evidence (issue 30): PyTorch's two lifetime errors keep their message, first and
unchanged, and gain a note naming the residual, who released or bumped it, and what each fix
costs; the costs are checked by running the fixed program."""

import inspect

import pytest
import torch

import tracekit as tk
from tracekit.explain import HEAD


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
    assert f"needed #{exp.node.index} ExpBackward0.result ((3, 5) float32, 60 B), saved by `exp` at " \
           f"{_line('forward-twice')}" in note
    assert f"The first backward() at {_line('first-backward')} released it after step {exp.released_at} " in note
    # the retain_graph fix, run: what stays alive after a retained backward is what the note says it keeps
    x, w = _leaves()
    y = torch.tanh(x @ w).exp().sum()  # held: a trace holds its output weakly
    kept = tk.trace(y).backward(retain_graph=True)
    alive = sum(s.nbytes for s in kept.graph_owned_storages() if not s.expired())
    assert f"retain_graph=True on the first backward(): keeps {tk.format_bytes(alive)} (2 storages it freed)" in note
    assert "recompute the forward (4 ops," in note


def test_second_autograd_grad_through_a_view():
    x, w = _leaves()
    with pytest.raises(RuntimeError) as info, tk.explain():
        h = x.exp()
        y = (h[1:] @ w).sum()  # the mm saves a view of h
        torch.autograd.grad(y, [w])
        torch.autograd.grad(y, [w])
    note = _note(info.value)
    assert "needed #2 MmBackward0.self ((2, 4) float32, 32 B)" in note
    # h is a variable of this frame: retaining the graph keeps no byte more than h already does
    assert "The earlier torch.autograd.grad()" in note and "keeps 0 B (0 storages only the graph holds)" in note


def _modified(program) -> str:
    err = _error(program)
    assert str(err).startswith("one of the variables needed for gradient computation has been modified by an inplace")
    return _note(err)


def test_inplace_on_an_intermediate():
    x, _ = _leaves()

    def program():
        with tk.explain():
            h = x.exp()
            loss = h.sum() * 1.0
            h.add_(1)  # bump-intermediate
            loss.backward()
    note = _modified(program)
    assert "#0 ExpBackward0.result ((3, 4) float32, 48 B), saved by `exp`" in note
    assert "was saved at version 0 and is now at version 1" in note
    assert f"add_ at {_line('bump-intermediate')} (version -> 1)" in note
    assert "clone before `add_` (or save a clone): keeps 48 B more" in note
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
    note = _modified(program)
    assert "#0 MulBackward0.other ((3, 4) float32, 48 B)" in note and "now at version 2" in note
    assert f"mul_ at {_line('second-bump')[:-2]}" in note and f"add_ at {_line('second-bump')} (version -> 2)" in note
    # the clone fix, run: backward works, the gradient is the saved (cloned) value, and the clone
    # is the 48 B more the note says
    b = a.clone()
    y = (x * b).sum()
    a.mul_(2)
    y.backward()
    assert torch.equal(x.grad, b) and b.untyped_storage().nbytes() == 48 and "keeps 48 B more" in note


def test_inplace_through_a_view_of_an_intermediate():
    x, w = _leaves()

    def program():
        with tk.explain():
            h = torch.sigmoid(x @ w)
            loss = h.sum()
            h[0].zero_()  # view-bump
            loss.backward()
    note = _modified(program)
    assert "#1 SigmoidBackward0.result ((3, 5) float32, 60 B), saved by `sigmoid`" in note
    assert f"zero_ at {_line('view-bump')}" in note and "an out-of-place op instead of `zero_`" in note


def test_inplace_on_a_view_of_an_input():
    x, _ = _leaves()
    a = torch.randn(2, 4)

    def program():
        with tk.explain():
            y = (x[:2] * a[0]).sum()
            a.add_(1)  # base-bump
            y.backward()
    note = _modified(program)
    assert "MulBackward0.other ((4) float32, 16 B)" in note and f"add_ at {_line('base-bump')}" in note
    assert "a new 32 B allocation" in note  # the out-of-place add allocates all of a


def test_after_the_fact_from_the_traceback():
    err = _error(_twice_plain)
    assert tk.explain(err) is err
    note = _note(err)
    assert "needed #2 ExpBackward0.result (shape unknown (freed before tracing)), saved by `exp`" in note
    x, _ = _leaves()
    a = torch.randn(3, 4)
    y = (x * a).sum()
    a.mul_(2)
    try:
        y.backward()
    except RuntimeError as caught:
        err = tk.explain(caught)
    note = _note(err)
    assert "#0 MulBackward0.other ((3, 4) float32, 48 B)" in note and "ran unwatched" in note
    assert tk.explain(err) is err and len(err.__notes__) == 1  # explained once


def test_other_errors_and_working_programs_are_untouched():
    with pytest.raises(ValueError) as info, tk.explain():
        raise ValueError("mine")
    assert not getattr(info.value, "__notes__", None)
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
