"""The corpus author's own checks, written from the prompts' meaning; not the course grader.

Each judge takes the namespace a variant left behind and returns "ok" or "bad (<reason>)".
Reference values were measured with plain PyTorch / tk.trace on torch 2.13 CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch

import tracekit as tk

EX01_Q1 = {
    "mul:a": {"other"}, "mul:b": {"self"}, "mul:ab": {"self", "other"},
    "div:a": {"other"}, "div:b": {"self", "other"}, "div:ab": {"self", "other"},
    "mm:a": {"mat2"}, "mm:b": {"self"}, "mm:ab": {"self", "mat2"},
    "sub:a": set(), "sub:b": set(), "sub:ab": set(),
}
EX01_Q2 = {op: {"result"} for op in ["exp", "tanh", "sigmoid", "sqrt", "relu", "reciprocal", "expm1", "rsqrt"]}
EX01_Q2 |= {op: {"self"} for op in ["sin", "cos", "log", "abs", "log1p", "erf", "atan"]}
EX01_Q2["neg"] = set()


def _table_of_sets(ns: dict, name: str, ref: dict) -> str:
    v = ns.get(name)
    if not isinstance(v, Mapping):
        return f"bad ({name} is {type(v).__name__})"
    for k, want in ref.items():
        if k not in v:
            return f"bad (missing {k})"
        got = v[k]
        if isinstance(got, str) or set(got) != want or len(list(got)) != len(want):
            return f"bad ({k}: {got!r})"
    return "ok"


def _ex01_q3(ns: dict) -> str:
    cls = ns.get("Sigmoid")
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        return "bad (no Sigmoid Function)"
    graphs = []
    cases = [(torch.float64, (5,)), (torch.float32, (3, 4)), (torch.float64, (2, 3, 2)), (torch.float32, ())]
    for dtype, shape in cases:
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        y = cls.apply(x)
        graphs.append((x, y))
    for x, y in graphs:
        if y.dtype != x.dtype or y.shape != x.shape:
            return f"bad (output {y.dtype} {tuple(y.shape)} for {x.dtype} {tuple(x.shape)})"
        if not torch.allclose(y, torch.sigmoid(x)):
            return "bad (forward value)"
        node = y.grad_fn
        saved = node.saved_tensors
        if len(saved) != 1:
            return f"bad ({len(saved)} saved tensors)"
        ptr = saved[0].untyped_storage().data_ptr()
        if ptr not in (x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()):
            return "bad (saved a copy)"
        attrs = [k for k, a in vars(node).items() if isinstance(a, torch.Tensor)] if hasattr(node, "__dict__") else []
        if attrs:
            return f"bad (tensors as ctx attributes: {attrs})"
    for x, y in reversed(graphs):
        g = torch.randn_like(y)
        (gx,) = torch.autograd.grad(y, x, g)
        s = torch.sigmoid(x.detach())
        if not torch.allclose(gx, g * s * (1 - s), rtol=1e-5, atol=1e-7):
            return "bad (gradient)"
    return "ok"


JUDGES = {
    "ex01": {
        "q1": lambda ns: _table_of_sets(ns, "q1_slots", EX01_Q1),
        "q2": lambda ns: _table_of_sets(ns, "q2_slots", EX01_Q2),
        "q3": _ex01_q3,
    },
}

EX02_Q1 = {
    "P1": [["SumBackward0", "MulBackward0", "ExpBackward0"]],
    "P2": [["SumBackward0", "MulBackward0", "SinBackward0"]],
    "P3": [["SumBackward0", "DivBackward0", "TanhBackward0"]],
    "P4": [["SumBackward0", "ExpBackward0", "MulBackward0"]],
    "P5": [["SumBackward0", "MulBackward0", "SigmoidBackward0"]],
    "P6": [["SumBackward0", "AddBackward0", "ExpBackward0", "CosBackward0"],
           ["SumBackward0", "AddBackward0", "CosBackward0", "ExpBackward0"]],
    "P7": [["SumBackward0", "SigmoidBackward0", "MulBackward0"]],
    "P8": [["SumBackward0", "MulBackward0", "SinBackward0"]],
}
EX02_Q2 = {
    "P1": {"SumBackward0": set(), "MulBackward0": {"self", "other"}, "ExpBackward0": {"result"}},
    "P2": {"SumBackward0": set(), "MulBackward0": {"other"}, "SinBackward0": {"self"}},
    "P3": {"SumBackward0": set(), "DivBackward0": {"self", "other"}, "TanhBackward0": {"result"}},
    "P4": {"SumBackward0": set(), "ExpBackward0": {"result"}, "MulBackward0": {"self", "other"}},
    "P5": {"SumBackward0": set(), "MulBackward0": {"self", "other"}, "SigmoidBackward0": {"result"}},
    "P6": {"SumBackward0": set(), "AddBackward0": set(), "ExpBackward0": {"result"}, "CosBackward0": {"self"}},
    "P7": {"SumBackward0": set(), "SigmoidBackward0": {"result"}, "MulBackward0": {"other"}},
    "P8": {"SumBackward0": set(), "MulBackward0": {"self"}, "SinBackward0": {"self"}},
}
EX02_Q3 = {
    "P1": {"ExpBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None},
    "P2": {"SinBackward0.self": None, "MulBackward0.other": None},
    "P3": {"TanhBackward0.result": 2, "DivBackward0.self": 2, "DivBackward0.other": None},
    "P4": {"MulBackward0.self": None, "MulBackward0.other": None, "ExpBackward0.result": 1},
    "P5": {"SigmoidBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None},
    "P6": {"CosBackward0.self": None, "ExpBackward0.result": 2},
    "P7": {"MulBackward0.other": 2, "SigmoidBackward0.result": 1},
    "P8": {"SinBackward0.self": None, "MulBackward0.self": 1},
}


def _as_int(v):
    return None if v is None else int(v)


def _ex02_q1(ns: dict) -> str:
    v = ns.get("q1_order")
    if not isinstance(v, Mapping):
        return f"bad (q1_order is {type(v).__name__})"
    for pid, allowed in EX02_Q1.items():
        if pid not in v or list(v[pid]) not in allowed:
            return f"bad ({pid}: {v.get(pid)!r})"
    return "ok"


def _ex02_q2(ns: dict) -> str:
    v = ns.get("q2_reads")
    if not isinstance(v, Mapping):
        return f"bad (q2_reads is {type(v).__name__})"
    for pid, want in EX02_Q2.items():
        got = v.get(pid)
        if not isinstance(got, Mapping) or set(got) != set(want):
            return f"bad ({pid} nodes: {got!r})"
        for node, slots in want.items():
            if isinstance(got[node], str) or set(got[node]) != slots:
                return f"bad ({pid} {node}: {got[node]!r})"
    return "ok"


def _ex02_q3(ns: dict) -> str:
    v = ns.get("q3_freed")
    if not isinstance(v, Mapping):
        return f"bad (q3_freed is {type(v).__name__})"
    for pid, want in EX02_Q3.items():
        got = v.get(pid)
        if not isinstance(got, Mapping) or {k: _as_int(x) for k, x in got.items()} != want:
            return f"bad ({pid}: {got!r})"
    return "ok"


JUDGES["ex02"] = {"q1": _ex02_q1, "q2": _ex02_q2, "q3": _ex02_q3}

EX03_Q1_CASES = [(6, 3, torch.float32), (10, 10, torch.float64), (33, 7, torch.float64), (17, 1, torch.float32)]
EX03_Q2_CASES = [(5, torch.float32), (2, torch.float64), (17, torch.float64), (64, torch.float32)]


def _number(v) -> float:
    return float(v.item() if isinstance(v, torch.Tensor) else v)


def _ex03_q1(ns: dict) -> str:
    fn = ns.get("pinned_bytes")
    if not callable(fn):
        return "bad (no pinned_bytes)"
    for n, k, dtype in EX03_Q1_CASES:
        w = torch.ones(k, dtype=dtype, requires_grad=True)
        big = torch.randn(n, n, dtype=dtype)
        want = tk.trace((big[0, :k] * w).sum()).saved_bytes
        got = fn(n, k, dtype)
        if _number(got) != want:
            return f"bad ({n}, {k}, {dtype}: {got!r} != {want})"
    return "ok"


def _ex03_q2(ns: dict) -> str:
    fn = ns.get("visible_and_pinned")
    if not callable(fn):
        return "bad (no visible_and_pinned)"
    for n, dtype in EX03_Q2_CASES:
        a = torch.randn(n, dtype=dtype, requires_grad=True)
        h = a * 2
        tr = tk.trace((h[:-1] * h[1:]).sum())
        want = [tr.visible_bytes, tr.saved_bytes]
        got = fn(n, dtype)
        if len(got) != 2 or [_number(x) for x in got] != want:
            return f"bad ({n}, {dtype}: {got!r} != {want})"
    return "ok"


JUDGES["ex03"] = {"q1": _ex03_q1, "q2": _ex03_q2}

EX05_Q2 = {"V1": [0, 2], "V2": [1, 2], "V3": [0, 1], "V4": [0, 1], "V5": [0, 1], "V6": [0, 0], "V7": [2, 5],
           "V8": [0, 2], "V9": [1, 1]}


def _ex05_q1(ns: dict) -> str:
    fn = ns.get("fixed")
    if not callable(fn):
        return "bad (no fixed)"
    cases = [(torch.float64, (6,)), (torch.float32, (3, 4)), (torch.float32, (5,)), (torch.float64, (2, 3))]
    for dtype, shape in cases:
        a = torch.randn(shape, dtype=dtype, requires_grad=True)
        try:
            loss, h = fn(a)
            if a.grad is None:
                loss.backward()
        except Exception as err:  # noqa: BLE001
            return f"bad ({shape}: {type(err).__name__})"
        x = a.detach()
        if loss.shape != () or not torch.allclose(loss.detach(), torch.sin(2 * x).sum()):
            return "bad (loss)"
        if not torch.allclose(h.detach(), 2 * x + 1):
            return "bad (next h)"
        if not torch.allclose(a.grad, 2 * torch.cos(2 * x)):
            return "bad (a.grad)"
    return "ok"


def _ex05_q2(ns: dict) -> str:
    v = ns.get("q2_versions")
    if not isinstance(v, Mapping):
        return f"bad (q2_versions is {type(v).__name__})"
    for pid, want in EX05_Q2.items():
        got = v.get(pid)
        if got is None or [int(x) for x in got] != want:
            return f"bad ({pid}: {got!r})"
    return "ok"


JUDGES["ex05"] = {"q1": _ex05_q1, "q2": _ex05_q2}

EX09_Q1 = {"C1": "optimizer state", "C2": "saved activations", "C3": "saved activations",
           "C4": "application references", "C5": "saved activations", "C6": "application references"}


def _adam_truth(model: torch.nn.Module) -> int:
    clone = copy.deepcopy(model)
    opt = torch.optim.Adam(clone.parameters())
    for p in clone.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values())


def _ex09_q1(ns: dict) -> str:
    v = ns.get("q1_largest")
    if not isinstance(v, Mapping):
        return f"bad (q1_largest is {type(v).__name__})"
    wrong = {k: v.get(k) for k, want in EX09_Q1.items() if v.get(k) != want}
    return f"bad ({wrong})" if wrong else "ok"


def _ex09_q2(ns: dict) -> str:
    fn = ns.get("adam_state_bytes")
    if not callable(fn):
        return "bad (no adam_state_bytes)"
    lin = torch.nn.Linear
    models = [
        torch.nn.Sequential(lin(3, 5), lin(5, 2)),
        torch.nn.Sequential(lin(7, 4, bias=False), lin(4, 4, bias=False), lin(4, 1, bias=False)).double(),
        torch.nn.Sequential(lin(6, 6), lin(6, 3, bias=False)).double(),
        torch.nn.Sequential(lin(16, 8, bias=False)),
    ]
    for m in models:
        want, got = _adam_truth(m), fn(m)
        if _number(got) != want:
            return f"bad ({got!r} != {want})"
    return "ok"


JUDGES["ex09"] = {"q1": _ex09_q1, "q2": _ex09_q2}
