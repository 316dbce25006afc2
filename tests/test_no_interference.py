"""Capturing must never change what autograd computes or raises."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit as tk

UNARY = {
    "exp": lambda t: t.exp(), "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu,
    "sin": torch.sin, "cos": torch.cos, "gelu": torch.nn.functional.gelu, "square": lambda t: t.pow(2),
    "softmax": lambda t: torch.softmax(t, -1), "log_softmax": lambda t: torch.log_softmax(t, -1),
    "layer_norm": lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:]),
    "transpose_back": lambda t: t.t().contiguous().t(), "slice_cat": lambda t: torch.cat([t[:, :2], t[:, 2:]], 1),
    "dropout": lambda t: torch.nn.functional.dropout(t, 0.3, training=True),
    "log_abs": lambda t: (t.abs() + 1).log(), "clone_inplace": lambda t: t.clone().mul_(2),
}
BINARY = {
    "mul": torch.mul, "add": torch.add, "sub": torch.sub, "div": lambda a, b: a / (b.abs() + 1),
    "matmul": lambda a, b: a @ b.t() @ a,
}


def build(program, a, b):
    h = a
    for kind, name in program:
        h = UNARY[name](h) if kind == "u" else BINARY[name](h, b)
    return (h * h).sum()


def grads(program, seed, use_capture):
    torch.manual_seed(seed)
    a = torch.randn(4, 4, requires_grad=True)
    b = torch.randn(4, 4, requires_grad=True)
    torch.manual_seed(seed + 1)  # dropout masks drawn the same way in both runs
    if use_capture:
        with tk.capture() as cap:
            y = build(program, a, b)
        cap.trace(y).backward()
    else:
        y = build(program, a, b)
        y.backward()
    return y.detach(), a.grad, b.grad


programs = st.lists(
    st.one_of(
        st.tuples(st.just("u"), st.sampled_from(sorted(UNARY))),
        st.tuples(st.just("b"), st.sampled_from(sorted(BINARY))),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(program=programs, seed=st.integers(0, 2**16))
def test_gradients_bitwise_equal_with_and_without_capture(program, seed):
    plain = grads(program, seed, use_capture=False)
    captured = grads(program, seed, use_capture=True)
    for p, c in zip(plain, captured):
        assert bitwise_equal(p, c)


def bitwise_equal(p, c):
    if p is None or c is None:
        return p is None and c is None
    return p.shape == c.shape and torch.equal(p.view(torch.int32), c.view(torch.int32))


@settings(max_examples=30, deadline=None)
@given(program=programs, seed=st.integers(0, 2**16))
def test_trace_without_backward_changes_nothing(program, seed):
    torch.manual_seed(seed)
    a = torch.randn(4, 4, requires_grad=True)
    b = torch.randn(4, 4, requires_grad=True)
    torch.manual_seed(seed + 1)
    y = build(program, a, b)
    tr = tk.trace(y)
    tr.text()
    tr.draw()
    y.backward()
    ga = a.grad.clone()
    torch.manual_seed(seed)
    a2 = torch.randn(4, 4, requires_grad=True)
    b2 = torch.randn(4, 4, requires_grad=True)
    torch.manual_seed(seed + 1)
    build(program, a2, b2).backward()
    assert bitwise_equal(ga, a2.grad)


def _error(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - we compare whatever PyTorch raises
        return type(err), str(err)
    return None


def backward_twice(observe):
    a = torch.randn(3, requires_grad=True)
    y = (a.exp() * a).sum()
    if observe:
        tk.trace(y).backward()
        return tk.trace(y).backward()
    y.backward()
    y.backward()


def inplace_after_save(observe):
    a = torch.randn(3, requires_grad=True)
    h = a * 2
    y = h.sin()
    h.add_(1)
    out = y.sum()
    return tk.trace(out).backward() if observe else out.backward()


def inplace_on_leaf_view(observe):
    a = torch.randn(3, requires_grad=True)
    h = a.sigmoid()
    h.mul_(2)  # sigmoid saved its output, which was just overwritten
    out = h.sum()
    return tk.trace(out).backward() if observe else out.backward()


def nonscalar_without_gradient(observe):
    a = torch.randn(3, requires_grad=True)
    y = a * 2
    return tk.trace(y).backward() if observe else y.backward()


def wrong_gradient_shape(observe):
    a = torch.randn(3, requires_grad=True)
    y = a.exp()
    return tk.trace(y).backward(torch.ones(4)) if observe else y.backward(torch.ones(4))


def custom_function_twice(observe):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return 2 * t * g

    a = torch.randn(3, requires_grad=True)
    y = Square.apply(a).sum()
    if observe:
        tk.trace(y).backward()
        return tk.trace(y).backward()
    y.backward()
    y.backward()


@pytest.mark.parametrize(
    "scenario",
    [backward_twice, inplace_after_save, inplace_on_leaf_view, nonscalar_without_gradient,
     wrong_gradient_shape, custom_function_twice],
)
def test_same_errors_with_and_without_tracekit(scenario):
    plain = _error(lambda: scenario(False))
    observed = _error(lambda: scenario(True))
    assert plain is not None
    assert observed == plain


def test_errors_raised_inside_capture_are_unchanged():
    a = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        with tk.capture():
            a + torch.randn(4)
    with tk.capture():  # the failed block closed the capture
        pass


def test_failed_backward_records_the_error_and_steps_so_far():
    a = torch.randn(3, requires_grad=True)
    h = a * 2
    y = h.sin()
    h.add_(1)
    out = y.sum()
    tr = tk.trace(out)
    (sin_self,) = tr.nodes[1].residuals
    assert sin_self.status == "modified in place"
    assert "is at version 1; expected version 0" in sin_self.error
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tr.backward()
    assert "modified by an inplace operation" in tr.error
    assert [s.node.name for s in tr.steps] == ["SumBackward0", "SinBackward0"]
    assert "backward raised" in tr.text()
