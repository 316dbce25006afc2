"""Where the user is: the source line of a torch call, and the names the user's code gives to
tensors and parameters. tracekit's own frames and torch's are skipped; a tracekit module that
runs user-level programs (a scenario, the CLI, the lab) says so with `USER_LEVEL = True`."""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

import torch

from .internals import closure_values, module_entries
from .storage import StorageKey, device_text, storage_key

_TORCH_DIR = os.path.dirname(torch.__file__)
_PARAMETER = torch.nn.Parameter
_device = device_text
_OWN_DIR = os.path.dirname(__file__)
SKIPPED: dict[str, bool] = {}  # file name -> whether its frames are torch's or tracekit's own (is_skipped)
_LABEL: dict[str, str] = {}  # file name -> how a source line is labelled
_NOTEBOOK_CELL = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")

Names = dict[StorageKey, tuple[str, bool]]  # storage -> (the user's name, whether it is a parameter)


def is_skipped(frame: FrameType) -> bool:
    """Whether a frame is torch's or tracekit's own, not the user's (cached by file in SKIPPED)."""
    name = frame.f_code.co_filename
    skip = SKIPPED.get(name)
    if skip is None:
        internal = name.startswith(_OWN_DIR) and not frame.f_globals.get("USER_LEVEL", False)
        skip = SKIPPED[name] = internal or name.startswith((_TORCH_DIR, "<frozen"))
    return skip


def user_frame(depth: int = 2) -> FrameType | None:
    """The innermost frame, from `depth` frames above this call, that is neither torch's nor
    tracekit's: where the user's line is."""
    frame: FrameType | None = sys._getframe(depth)
    known = SKIPPED
    while frame is not None:
        skip = known.get(frame.f_code.co_filename)
        if not (is_skipped(frame) if skip is None else skip):
            break
        frame = frame.f_back
    return frame


def where(frame: FrameType | None) -> str | None:
    """`file.py:12`; in a notebook cell `cell [3] line 12`, with the cell's execution count as the
    student sees it (`cell line 12` where IPython does not know it; kernel file names change every run)."""
    if frame is None:
        return None
    return _line_text(frame.f_code.co_filename, frame.f_lineno)


def where_at(places: dict[tuple[int, int], str], code: CodeType | None, offset: int,
             counts: dict[str, int | None] | None = None) -> str | None:
    """`where` of a frame that ran `code` and was at `offset` (its f_lasti: cheaper to keep than its
    line); `places`: the texts made so far, kept by the caller for one trace while that code is alive;
    `counts`: notebook cells' execution counts as cell_counts read them (else read now: a cell's latest run)."""
    if code is None:
        return None
    key = (id(code), offset)  # a code object's own hash reads all its fields
    text = places.get(key)
    if text is None:
        line = next((n for start, end, n in code.co_lines() if start <= offset < end), None)
        text = places[key] = _line_text(code.co_filename, line if line is not None else code.co_firstlineno, counts)
    return text


def cell_counts() -> dict[str, int]:
    """The execution count now of every notebook cell IPython compiled (file name -> In[n]): where_at
    made later names the run that was current when these were read (one copy of IPython's own map,
    none outside IPython: cheaper than finding which cells a trace's lines are in)."""
    numbers = _filename_map()
    return {name: n for name, n in numbers.items() if isinstance(n, int)} if numbers else {}


def _label(name: str) -> str:
    label = _LABEL.get(name)
    if label is None:
        cell = _NOTEBOOK_CELL.search(name) or name.startswith("<ipython-input")
        label = _LABEL[name] = "cell" if cell else os.path.basename(name)
    return label


def _line_text(name: str, line: int, counts: dict[str, int | None] | None = None) -> str:
    label = _label(name)
    if label == "cell":
        count = counts.get(name) if counts is not None else _execution_count(name)
        return f"cell [{count}] line {line}" if count is not None else f"cell line {line}"
    return f"{label}:{line}"


def _execution_count(filename: str) -> int | None:
    """The In[n] number IPython gave the cell compiled as `filename` (its latest run), if known."""
    numbers = _filename_map()
    count = numbers.get(filename) if numbers else None
    return count if isinstance(count, int) else None


def _filename_map() -> dict[str, Any] | None:
    """IPython's cell file name -> execution count map, where an IPython shell runs."""
    shell = sys.modules.get("IPython")
    shell = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    numbers = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return numbers if isinstance(numbers, dict) else None


BUFFER = "buffer "  # a name that is a module's buffer: `buffer model.bn1.running_mean`
CLOSURE = " (in the closure of "  # `x (in the closure of f)`


def caller_names(modules: list[tuple[torch.nn.Module, list[tuple[str, Any, Any, Any]]]] | None = None) -> Names:
    """Names the user's code gives to tensors and parameters: storage key -> (name, is a parameter:
    an nn.Parameter or a module's named parameter). Also a module's buffers (`buffer
    model.bn1.running_mean`), tensors in a dict (`batch['x']`) and in a function's closure
    (`x (in the closure of f)`). `modules`, when given, gets each module whose tree was named, with
    that tree (module_tree: read once per trace)."""
    names: Names = {}
    frame = user_frame(3)
    if frame is None:
        return names
    local_scope = frame.f_locals
    later: list[tuple[str, Any]] = []  # dicts and functions: named after the plain variables
    # a module-level frame (a notebook cell, a script) has one scope for both: read it once
    for scope in (local_scope,) if local_scope is frame.f_globals else (local_scope, frame.f_globals):
        for var, value in list(scope.items()):
            if var.startswith("_"):
                continue
            if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                names.setdefault(storage_key(value), (var, isinstance(value, torch.nn.Parameter)))
            elif isinstance(value, torch.nn.Module):
                tree = module_tree(value)
                name_module(names, value, var, tree)
                if modules is not None:
                    modules.append((value, tree))
            elif isinstance(value, dict) or (callable(value) and getattr(value, "__closure__", None)):
                later.append((var, value))
    for deep in (False, True):  # what a dict or function holds itself first, then what its closures hold
        for var, value in later:
            for inner, t in _held_tensors(var, value, 0 if deep else 2):
                names.setdefault(storage_key(t), (inner, isinstance(t, torch.nn.Parameter)))
    forget_snapshot(frame, local_scope)
    return names


def name_module(names: Names, module: torch.nn.Module, prefix: str,
                tree: list[tuple[str, Any, Any, Any]] | None = None) -> None:
    """Add a module's parameters (`prefix.fc.weight`) and buffers (`buffer prefix.bn.running_mean`)
    (`tree`: its module_tree, when the caller has read it)."""
    modules = (_named_modules(module, prefix) if tree is None else
               [(f"{prefix}.{name}" if name else prefix, parameters, buffers) for name, _, parameters, buffers in tree])
    for pname, p in _named_parameters(module, prefix, modules):  # the first name wins
        # a real parameter's key without storage_key's checks (a meta or fake one takes them)
        key = (("cpu" if p.is_cpu else _device(p.device), p.untyped_storage().data_ptr())
               if type(p) is _PARAMETER and not p.is_meta else storage_key(p))
        if key not in names:
            names[key] = (pname, True)
    for name, _, buffers in modules:  # named_buffers()' order
        for bname, b in buffers:
            if b is not None and b.layout == torch.strided:
                names.setdefault(storage_key(b), (f"{BUFFER}{name}.{bname}", False))


def _held_tensors(var: str, value: Any, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors a dict holds under string keys (`batch['x']`), or a function's closure holds (and
    the closures of the functions in it, two levels deep)."""
    if isinstance(value, dict):
        for key, item in list(value.items())[:256]:
            if isinstance(key, str) and isinstance(item, torch.Tensor) and item.layout == torch.strided:
                yield f"{var}[{key!r}]", item
        return
    for cell_name, item in closure_values(value).items():
        if isinstance(item, torch.Tensor) and item.layout == torch.strided:
            yield f"{cell_name}{CLOSURE}{var})", item
        elif depth < 2 and (isinstance(item, dict) or (callable(item) and getattr(item, "__closure__", None))):
            yield from _held_tensors(f"{var}.{cell_name}" if callable(item) else cell_name, item, depth + 1)


def _named_modules(module: torch.nn.Module, prefix: str) -> list[tuple[str, Any, Any]]:
    """(name, its own parameters, its own buffers) per module of `module.named_modules(prefix=prefix)`,
    in the same order (each module, then its children's trees), read straight from the modules' dicts."""
    return [(name, parameters, buffers) for name, _, parameters, buffers in module_tree(module, prefix)]


def module_paths(root: torch.nn.Module,
                 tree: list[tuple[str, Any, Any, Any]] | None = None) -> dict[torch.nn.Module, str]:
    """Each module in `root`'s tree -> its path (`""` for root, `layers.0.attn`), the first path of
    one reached twice: `{m: name for name, m in root.named_modules()}`, read from the modules' dicts
    (`tree`: its module_tree, when the caller has read it)."""
    return {m: name for name, m, _, _ in (module_tree(root) if tree is None else tree)}


def module_tree(module: torch.nn.Module, prefix: str = "") -> list[tuple[str, Any, Any, Any]]:
    """(name, module, its own parameters, its own buffers) in named_modules()' order (each module
    once, then its children's trees), read from the modules' dicts."""
    seen: set[int] = set()
    out = []
    todo = [(prefix, module)]
    while todo:
        name, m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        parameters, buffers, children = module_entries(m)
        out.append((name, m, parameters, buffers))
        todo.extend((f"{name}.{cname}" if name else cname, c) for cname, c in reversed(children) if c is not None)
    return out


def _named_parameters(module: torch.nn.Module, prefix: str,
                      modules: list[tuple[str, Any, Any]] | None = None) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """`module.named_parameters()` with names under `prefix`, in the same order (each module's own
    parameters, then its children's), read straight from the modules' dicts (`modules`: its
    _named_modules, when already read)."""
    for name, parameters, _ in modules if modules is not None else _named_modules(module, prefix):
        for pname, p in parameters:
            if p is not None:
                yield f"{name}.{pname}", p


def forget_snapshot(frame: FrameType, scope: dict[str, Any]) -> None:
    """Before Python 3.13, reading a function frame's f_locals leaves a dict on the frame that
    keeps every local alive (a `del y` would no longer free y's graph). Drop the tensors
    and modules from that snapshot so tracing never extends a lifetime. (3.13+ returns a
    write-through proxy: nothing to drop, and deleting would delete the variable.)"""
    if sys.version_info >= (3, 13) or not frame.f_code.co_flags & inspect.CO_OPTIMIZED or scope is frame.f_globals:
        return
    for var in [k for k, v in scope.items() if isinstance(v, (torch.Tensor, torch.nn.Module))]:
        del scope[var]
