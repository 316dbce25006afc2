"""The one door to PyTorch's internals: capabilities probed once, a public fallback where one
exists, a named error where none does, and no private access elsewhere in the package."""

import ast
from pathlib import Path

import pytest
import torch

import tracekit as tk
from tracekit import internals

PACKAGE = Path(tk.__file__).parent
# PyTorch's private names: attribute prefixes (`_saved_x`, `_version`, ...), names of private modules
# and classes, and the engine's frame name (a frame matched by its name is a private name too)
PRIVATE = ("_saved_", "_raw_saved", "_sequence_nr", "_current_autograd_node", "_register_hook_dict",
           "_backward_hooks", "_weak_ref", "_expired", "_free_weak_ref", "_cdata", "_forward_cls",
           "_python_dispatch", "_pytree", "_EventType", "_parameters", "_modules", "_version",
           "StorageWeakRef", "_engine_run_backward", "_C")
EXACT = {"_C", "_version", "_cdata", "_expired", "_modules", "_parameters"}  # whole names, not prefixes
ALLOWED = {"internals.py"}  # the one module that may name them: every other file of the package may not


def _private(name: str) -> set[str]:
    return {p for p in PRIVATE if (name == p if p in EXACT else name.startswith(p))
            or (p == "_engine_run_backward" and p in name)}

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


MODULES = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).as_posix() not in ALLOWED]


def _private_names(source: str) -> set[str]:
    """The private PyTorch names a module's code uses (docstrings left out; other strings count)."""
    code = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(code)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = set()
    for node in ast.walk(code):
        if isinstance(node, ast.Constant) and id(node) in docstrings:
            continue
        if isinstance(node, (ast.ImportFrom, ast.Import)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found |= {p for m in modules for part in m.split(".") for p in _private(part)}
            found |= {p for a in node.names for p in _private(a.name)}
        # an attribute (`h._version`) or a string that names one (`getattr(node, "_saved_" + slot)`);
        # a bare name is the module's own (`_version()` in cli.py)
        name = (node.attr if isinstance(node, ast.Attribute)
                else node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
        if name:
            found |= _private(name)
    return found


def test_the_check_finds_each_kind_of_private_name():
    """Not vacuous: an attribute, an import from a private module, a class name and a frame name."""
    assert _private_names("x = h._version") == {"_version"}
    assert _private_names("from torch.utils._pytree import tree_flatten") == {"_pytree"}
    assert _private_names("from torch.multiprocessing.reductions import StorageWeakRef") == {"StorageWeakRef"}
    assert _private_names("ok = f.f_code.co_name == '_engine_run_backward'") == {"_engine_run_backward"}
    assert _private_names("n = torch._C._current_autograd_node()") == {"_C", "_current_autograd_node"}
    assert _private_names('"""names _version in a docstring only"""\nx = t.version') == set()
    assert _private_names("for a in dir(n):\n    ok = a.startswith('_saved_')") == {"_saved_"}
    assert _private_names("self._COLOURS = _versions_entry(_C)") == set()  # the module's own names
    assert "exercises/watch.py" not in ALLOWED and len(MODULES) > 60


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_but_internals_reads_a_private_internal(path):
    assert _private_names(path.read_text()) == set()
