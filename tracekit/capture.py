"""Recording a trace: the graph walk, forward order, source lines and user names."""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import re
import sys
import threading
from collections import deque
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import keeper, rules
from .errors import NestedCaptureError, NoHistoryError, NotATensorError
from .model import Mutation, Node, Residual, Role, Storage, Trace
from .predict import annotate_without_data
from .progress import Progress
from .saved import attributes, is_custom_function, saved_slots
from .storage import has_data, storage_key, storage_nbytes, visible_nbytes, weak_storage

_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(__file__)
_USER_FACING = ("cli.py", "scenarios.py", "memory_budget.py", "lab.py")  # tracekit files that run user-level programs
_active = threading.local()
_NO_SEQUENCE = 2**64 - 1  # AccumulateGrad nodes carry no forward position


_SKIP: dict[str, bool] = {}  # file name -> whether its frames are torch's or tracekit's own


def _skipped(name: str) -> bool:
    skip = _SKIP.get(name)
    if skip is None:
        internal = name.startswith(_OWN_DIR) and not name.endswith(_USER_FACING)
        skip = _SKIP[name] = internal or name.startswith((_TORCH_DIR, "<frozen"))
    return skip


def _user_frame() -> FrameType | None:
    """The innermost frame that is neither torch's nor tracekit's: where the user's line is."""
    frame = sys._getframe(2)
    known = _SKIP
    while frame is not None:
        name = frame.f_code.co_filename
        skip = known.get(name)
        if not (_skipped(name) if skip is None else skip):
            break
        frame = frame.f_back
    return frame


_NOTEBOOK_CELL = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")


_LABEL: dict[str, str] = {}  # file name -> how a source line is labelled


def _where(frame: FrameType | None) -> str | None:
    """`file.py:12`; in a notebook cell `cell:12` (the kernel's file names change every run)."""
    if frame is None:
        return None
    name = frame.f_code.co_filename
    label = _LABEL.get(name)
    if label is None:
        cell = _NOTEBOOK_CELL.search(name) or name.startswith("<ipython-input")
        label = _LABEL[name] = "cell" if cell else os.path.basename(name)
    return f"{label}:{frame.f_lineno}"


def _is_leaf_node(node: Any) -> bool:
    return hasattr(node, "variable")


def op_name(node: Any) -> str:
    """The forward op behind a backward node: MulBackward0 -> mul, NativeLayerNormBackward0 -> layer_norm."""
    if is_custom_function(node):
        return node._forward_cls.__name__
    return _op_from_name(node.name())


@functools.cache
def _op_from_name(name: str) -> str:
    base = re.sub(r"Backward\d*$", "", name.split("::")[-1])
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    return snake.removeprefix("native_")


def _is_inplace(call: str) -> bool:
    return (call.endswith("_") and not call.startswith("_")) or (call.startswith("__i") and call.endswith("__"))


_INPLACE: dict[str, bool] = {}  # call name -> whether it writes into its first argument


class _Recorder(TorchFunctionMode):
    """Sees each torch call; gives the nodes it created their source line and call name,
    and remembers in-place calls (which bump a tensor's version counter)."""

    def __init__(self, sources: dict[int, tuple[str, str]], mutations: list[Mutation]) -> None:
        super().__init__()
        self.sources = sources
        self.mutations = mutations

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        call = getattr(func, "__name__", None) or str(func)
        if isinstance(result, torch.Tensor):  # the common case, without building lists
            fn = result.grad_fn
            roots = [fn] if fn is not None else []
        else:
            roots = [t.grad_fn for t in _tensors_in(result) if t.grad_fn is not None]
        inplace = _INPLACE.get(call)
        if inplace is None:
            inplace = _INPLACE[call] = _is_inplace(call)
        mutated = args[0] if inplace and args and isinstance(args[0], torch.Tensor) else None
        if roots or mutated is not None:
            where = _where(_user_frame())
            if roots:
                _mark_new(roots, self.sources, where, call)
            if mutated is not None and mutated.layout == torch.strided:
                self.mutations.append(Mutation(call, where, storage_key(mutated), mutated._version))
        return result


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return []


def _mark_new(roots: list[Any], sources: dict[int, tuple[str, str]], where: str | None, call: str) -> None:
    """Give every node not yet seen, reachable from roots, this call's source."""
    todo = list(roots)
    while todo:
        node = todo.pop()
        seq = node._sequence_nr()
        if seq == _NO_SEQUENCE or seq in sources:
            continue
        sources[seq] = (where, call)
        todo.extend(n for n, _ in node.next_functions if n is not None)


class capture:
    """Context manager: record forward ops with their source lines, then `cap.trace(y)`."""

    def __init__(self) -> None:
        self.sources: dict[int, tuple[str, str]] = {}
        self.mutations: list[Mutation] = []
        self._mode: _Recorder | None = None

    def __enter__(self) -> capture:
        if getattr(_active, "capture", None) is not None:
            raise NestedCaptureError(
                "tk.capture() is already active: close the outer `with tk.capture()` block "
                "first, or trace everything from the outer one."
            )
        _active.capture = self
        self._mode = _Recorder(self.sources, self.mutations)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._mode is not None
        self._mode.__exit__(*exc)
        self._mode = None
        _active.capture = None

    def trace(self, *outputs: torch.Tensor, progress: bool | None = None) -> Trace:
        """The trace of the graph behind `outputs`, with forward order and source lines
        (`progress`: a progress bar on stderr; None: only for traces taking over 2 s)."""
        return build_trace(outputs, self.sources, _caller_names(), self.mutations, progress)


def trace(*outputs: torch.Tensor, progress: bool | None = None) -> Trace:
    """The trace of any tensor's autograd graph (graph walk only: no source lines;
    `progress`: a progress bar on stderr; None: only for traces taking over 2 s)."""
    return build_trace(outputs, None, _caller_names(), progress=progress)


def _caller_names() -> dict[tuple[str, int], tuple[str, bool]]:
    """Names the user's code gives to tensors and parameters: storage key -> (name, is a parameter:
    an nn.Parameter or a module's named parameter)."""
    names: dict[tuple[str, int], tuple[str, bool]] = {}
    frame = _user_frame()
    if frame is None:
        return names
    local_scope = frame.f_locals
    for scope in (local_scope, frame.f_globals):
        for var, value in list(scope.items()):
            if var.startswith("_"):
                continue
            if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                names.setdefault(storage_key(value), (var, isinstance(value, torch.nn.Parameter)))
            elif isinstance(value, torch.nn.Module):
                for pname, p in value.named_parameters():
                    names.setdefault(storage_key(p), (f"{var}.{pname}", True))
    _forget_snapshot(frame, local_scope)
    return names


def _forget_snapshot(frame: FrameType, scope: dict[str, Any]) -> None:
    """Before Python 3.13, reading a function frame's f_locals leaves a dict on the frame that
    keeps every local alive (a `del y` would no longer free y's graph). Drop the tensors
    and modules from that snapshot so tracing never extends a lifetime. (3.13+ returns a
    write-through proxy: nothing to drop, and deleting would delete the variable.)"""
    if sys.version_info >= (3, 13) or not frame.f_code.co_flags & inspect.CO_OPTIMIZED or scope is frame.f_globals:
        return
    for var in [k for k, v in scope.items() if isinstance(v, (torch.Tensor, torch.nn.Module))]:
        del scope[var]


def _walk(roots: list[Any]) -> list[Any]:
    """Every backward node reachable from roots (iterative: any depth)."""
    seen: set[Any] = set()
    order: list[Any] = []
    todo = deque(roots)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        todo.extend(n for n, _ in node.next_functions if n is not None and n not in seen)
    return order


def _check_outputs(outputs: tuple[Any, ...]) -> list[Any]:
    if not outputs:
        raise NotATensorError("trace() needs at least one tensor: pass the output, e.g. tk.trace(loss).")
    roots = []
    for i, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            raise NotATensorError(
                f"output {i} is a {type(out).__name__}, not a torch.Tensor: pass the tensor "
                "your computation returned, e.g. tk.trace(loss)."
            )
        if out.grad_fn is None:
            what = "a leaf that requires grad" if out.requires_grad else "a tensor that does not require grad"
            raise NoHistoryError(
                f"output {i} has no autograd history ({what}): compute it from tensors "
                "created with requires_grad=True, outside torch.no_grad(), then trace the result."
            )
        roots.append(out.grad_fn)
    return roots


def build_trace(
    outputs: tuple[torch.Tensor, ...],
    sources: dict[int, tuple[str, str]] | None,
    names: dict[tuple[str, int], tuple[str, bool]],
    mutations: list[Mutation] | None = None,
    progress: bool | None = None,
) -> Trace:
    """Walk the graph once and turn what autograd holds into a Trace."""
    with gc_paused():
        return _build(outputs, sources, names, mutations, progress)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cycle collector while making many small objects (it would rescan them all)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _build(
    outputs: tuple[torch.Tensor, ...],
    sources: dict[int, tuple[str, str]] | None,
    names: dict[tuple[str, int], tuple[str, bool]],
    mutations: list[Mutation] | None,
    progress: bool | None = None,
) -> Trace:
    roots = _check_outputs(outputs)
    everything = _walk(roots)
    graph_nodes = sorted((n for n in everything if not _is_leaf_node(n)), key=lambda n: n._sequence_nr())
    keeper.keep(graph_nodes)
    position = {n: i for i, n in enumerate(graph_nodes)}
    output_keys = {storage_key(t) for t in outputs}
    leaves: dict[str, str] = {}
    storages: dict[tuple[str, int], Storage] = {}
    nodes: list[Node] = []

    leaf_roles: dict[str, Role] = {}
    label_of: dict[Any, str] = {}  # leaf node -> its label (each leaf is looked up once)

    def leaf_label(leaf_node: Any) -> str:
        label = label_of.get(leaf_node)
        if label is not None:
            return label
        label_of[leaf_node] = label = _leaf_label(leaf_node)
        return label

    def _leaf_label(leaf_node: Any) -> str:
        var = leaf_node.variable
        label, named_param = names.get(storage_key(var), (None, False))
        label = label or f"leaf{len(leaves)}"
        if label not in leaves:
            role = _leaf_role(var, named_param)
            leaf_roles[label] = role
            leaves[label] = f"{role.value} {tuple(var.shape)} {str(var.dtype).removeprefix('torch.')}"
        return label

    # leaves that get gradients (parameters): a residual in their storage is theirs (e.g. W.t())
    parameter_keys = {storage_key(n.variable): leaf_label(n) for n in everything if _is_leaf_node(n)}
    leaf_role_of = {key: leaf_roles[label] for key, label in parameter_keys.items()}
    bar = Progress(len(graph_nodes), "tracing nodes", progress)
    for i, gnode in enumerate(graph_nodes):
        bar.update(i)
        seq = gnode._sequence_nr()
        where, call = (sources or {}).get(seq, (None, None))
        inputs = tuple(
            position[n] if n in position else leaf_label(n)
            for n, _ in gnode.next_functions
            if n is not None
        )
        name = gnode.name()
        node = Node(name, op_name(gnode), i, where, call, inputs)
        node.attributes = attributes(gnode)
        slot_rules = _rules_by_slot(gnode)
        node.described = slot_rules is not None
        for saved in saved_slots(gnode):
            t = saved.tensor
            key = storage_key(t) if t is not None and t.layout == torch.strided else None
            role, producer, kind = _role(saved.slot, t, gnode, position, names, output_keys, parameter_keys, key)
            storage = None
            if key is not None:
                storage = storages.get(key)
                if storage is None:
                    var, is_param = names.get(key, (parameter_keys.get(key), key in parameter_keys))
                    is_param = is_param or key in parameter_keys or (t.is_leaf and t.requires_grad)
                    storage = Storage(
                        key, storage_nbytes(t), str(t.device),
                        names=(var,) if var else (), is_parameter=is_param,
                        is_output=key in output_keys, weak=weak_storage(t),
                        leaf_role=leaf_role_of.get(key) or (_leaf_role(t, is_param) if t.is_leaf and t.requires_grad
                                                            else None),
                    )
                    storages[key] = storage
            residual = Residual(
                node=node,
                slot=saved.slot,
                shape=tuple(t.shape) if t is not None else None,
                dtype=_dtype_text(t.dtype) if t is not None else None,
                device=_device_text(t.device) if t is not None else None,
                nbytes=visible_nbytes(t) if t is not None else None,
                storage=storage,
                role=role,
                producer=producer,
                rule=_rule_text(saved.slot, slot_rules),
                held_in=saved.held_in,
                status=saved.status,
                version=t._version if t is not None else None,
                preview=_preview(t),
                error=saved.error,
                kind=kind,
            )
            if saved.status == "modified in place":
                _explain_modification(residual, saved.error or "", mutations or [], t)
            if storage is not None:
                storage.residuals.append(residual)
            node.residuals.append(residual)
        nodes.append(node)
    trace = Trace(nodes, list(storages.values()), tuple(outputs), graph_nodes, leaves, sources is not None)
    trace.mutations = list(mutations or [])
    trace.leaf_roles = leaf_roles
    trace.output_names = [names.get(storage_key(t), (None,))[0] if t.layout == torch.strided else None
                          for t in outputs]
    bar.close()
    annotate_without_data(trace, outputs)
    return trace


_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def _explain_modification(residual: Residual, error: str, mutations: list[Mutation], t: torch.Tensor | None) -> None:
    """Fill in the versions (from PyTorch's own message) and the in-place calls that bumped them."""
    found = _VERSIONS.search(error)
    if found:
        residual.version, residual.saved_version = int(found.group(1)), int(found.group(2))
    if t is not None and t.layout == torch.strided:
        key = storage_key(t)
        residual.modified_by = [m for m in mutations if m.storage == key]


_DTYPE_TEXT: dict[torch.dtype, str] = {}
_DEVICE_TEXT: dict[torch.device, str] = {}


def _dtype_text(dtype: torch.dtype) -> str:
    """`float32` for torch.float32 (cached: str() of a dtype is slow next to a dict lookup)."""
    text = _DTYPE_TEXT.get(dtype)
    if text is None:
        text = _DTYPE_TEXT[dtype] = str(dtype).removeprefix("torch.")
    return text


def _device_text(device: torch.device) -> str:
    """`cpu`, `cuda:0` (cached like _dtype_text)."""
    text = _DEVICE_TEXT.get(device)
    if text is None:
        text = _DEVICE_TEXT[device] = str(device)
    return text


def _preview(t: torch.Tensor | None) -> str | None:
    """The values of a small tensor as text (kept as text, so the trace holds no tensor)."""
    if t is None or t.numel() > 4 or t.layout != torch.strided or not has_data(t):
        return None
    try:
        values = t.detach().reshape(-1).tolist()
    except RuntimeError:  # e.g. a real scalar read while a FakeTensorMode is active
        return None
    text = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in values)
    return text if t.dim() == 0 else f"[{text}]"


def _rules_by_slot(gnode: Any) -> dict[str, list[str]] | None:
    """slot -> the gradient formulas that read it, for a node in the rule table."""
    return _slot_rules(type(gnode), gnode.name(), len(gnode.next_functions))


@functools.cache
def _slot_rules(kind: type, name: str, n_inputs: int) -> dict[str, list[str]] | None:
    table = rules.input_rules(name, n_inputs)
    if table is None:
        return None
    slots = {a[len("_saved_"):] for a in dir(kind) if a.startswith("_saved_")}
    by_slot: dict[str, list[str]] = {}
    for input_name, formula in table:
        for slot in rules.slots_read(formula, slots):
            by_slot.setdefault(slot, []).append(f"grad_{input_name} = {formula}")
    return by_slot


def _rule_text(slot: str, by_slot: dict[str, list[str]] | None) -> str:
    if by_slot is None:
        return rules.NOT_DESCRIBED
    base = slot.split("[")[0]
    found = by_slot.get(base)
    return "; ".join(found) if found else "saved, not read by the rules described"


def _leaf_role(t: torch.Tensor, named_parameter: bool) -> Role:
    """PARAMETER for an nn.Parameter or a module's named parameter, else INPUT (a leaf with grad)."""
    return Role.PARAMETER if named_parameter or isinstance(t, torch.nn.Parameter) else Role.INPUT


def _role(slot: str, t: torch.Tensor | None, gnode: Any, position: dict[Any, int],
          names: dict[tuple[str, int], tuple[str, bool]],
          output_keys: set[tuple[str, int]] = frozenset(),
          leaf_labels: dict[tuple[str, int], str] | None = None,
          key: tuple[str, int] | None = None) -> tuple[str, int | str | None, Role]:
    """(the role in words, who produced the value, the Role); `key`: t's storage key if known."""
    if t is None:
        return "unknown (not held)", None, Role.INTERMEDIATE
    if t.grad_fn is not None and t.grad_fn is not gnode and t.grad_fn not in position and t._version > 0:
        return "modified in place after it was saved", None, Role.INTERMEDIATE
    strided = t.layout == torch.strided
    if strided and key is None:
        key = storage_key(t)
    var, is_param = names.get(key, (None, False)) if strided else (None, False)
    producer = t.grad_fn
    made = Role.OUTPUT if strided and key in output_keys else Role.INTERMEDIATE
    if producer is gnode or slot.startswith("result"):
        return f"output of #{position[gnode]} {gnode.name()} (this node)", position[gnode], made
    if producer is None:
        if t.requires_grad or is_param or isinstance(t, torch.nn.Parameter):
            role = _leaf_role(t, is_param)
            label = var or (leaf_labels or {}).get(key) if strided else var
            return (f"{role.value} {var}" if var else role.value), label or role.value, role
        if var:
            return f"constant {var}", var, Role.CONSTANT
        if is_custom_function(gnode):  # made inside a custom/compiled forward, which ran without grad
            return "made inside the function's forward", None, Role.INTERMEDIATE
        return "constant (no grad)", "constant", Role.CONSTANT
    if producer in position:
        return f"output of #{position[producer]} {producer.name()}", position[producer], made
    return "intermediate (made outside the traced graph)", None, Role.INTERMEDIATE
