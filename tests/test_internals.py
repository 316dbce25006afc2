"""The one door to PyTorch's internals: capabilities probed once, a public fallback where one
exists, a named error where none does, and no private access elsewhere in the package."""

import ast
from pathlib import Path

import pytest
import torch

import tracekit as tk
from tracekit import internals

PACKAGE = Path(tk.__file__).parent
PRIVATE = ("_saved_", "_raw_saved", "_sequence_nr", "_current_autograd_node", "_register_hook_dict",
           "_backward_hooks", "_weak_ref", "_expired", "_free_weak_ref", "_cdata", "_forward_cls",
           "_python_dispatch", "_EventType", "_parameters", "_modules")


def test_this_torch_has_every_capability():
    assert internals.CAPABILITIES and all(internals.CAPABILITIES.values()), internals.CAPABILITIES


def test_without_the_current_node_the_public_pre_hooks_see_the_same_backward(monkeypatch):
    def observed():
        torch.manual_seed(0)
        a = torch.randn(5, requires_grad=True)
        h = a.exp()
        y = (h.sin() * h).sum() + a.cos().sum()
        del h
        tr = tk.trace(y).backward()
        return [s.node.name for s in tr.steps], tr.lifetimes().residuals, a.grad

    order, lifetimes, grad = observed()
    monkeypatch.setitem(internals.CAPABILITIES, "current_node", False)
    fallback_order, fallback_lifetimes, fallback_grad = observed()
    assert fallback_order == order and fallback_lifetimes == lifetimes and torch.equal(fallback_grad, grad)


def test_a_missing_capability_without_fallback_is_named(monkeypatch):
    monkeypatch.setitem(internals.CAPABILITIES, "saved_slots", False)
    internals.slot_names.cache_clear()
    try:
        y = torch.randn(3, requires_grad=True).exp().sum()
        with pytest.raises(tk.MissingCapabilityError, match="lacks `saved_slots`"):
            tk.trace(y)
    finally:
        internals.slot_names.cache_clear()
    assert issubclass(tk.MissingCapabilityError, tk.TracekitError)


OWN_DOORS = ("exercises", "grading", "judges")  # rewritten elsewhere (issue 29's report lists what they read)
MODULES = [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "internals.py" and p.parent.name not in OWN_DOORS]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_but_internals_reads_a_private_internal(path):
    code = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(code)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = set()
    for node in ast.walk(code):
        if isinstance(node, ast.Constant) and id(node) in docstrings:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {p for p in PRIVATE if p in node.module}
        name = (node.attr if isinstance(node, ast.Attribute)
                else node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
        if name:
            found |= {p for p in PRIVATE if name.startswith(p)}
    assert found == set()
