"""Building a trace: walk autograd's graph once and turn what it holds (nodes, saved slots,
storages) into the passive records of model.py. Nothing here runs while the forward runs."""

from __future__ import annotations

import functools
import re
from collections import deque
from typing import Any

import torch

from . import keeper, rules
from .errors import NoHistoryError, NotATensorError
from .frames import Names
from .keeper import gc_paused
from .model import Mutation, Node, Residual, Role, Status, Storage, Trace
from .progress import Progress
from .saved import SavedSlot, attributes, is_custom_function, saved_slots, slot_names
from .storage import StorageKey, device_text, has_data, storage_key, storage_nbytes, visible_nbytes, weak_ref
from .without_data import backend_of_outputs, note_for

Sources = dict[int, tuple[str | None, str]]  # a node's sequence number -> (source line, call name)
Modules = dict[int, str]  # a node's sequence number -> the module whose forward made it (its label)
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def is_leaf_node(node: Any) -> bool:
    """True for an AccumulateGrad node: the end of the graph at a leaf that gets a gradient."""
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


def walk(roots: list[Any]) -> list[Any]:
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


def build_trace(
    outputs: tuple[torch.Tensor, ...],
    sources: Sources | None,
    names: Names,
    mutations: list[Mutation] | None = None,
    progress: bool | None = None,
    modules: Modules | None = None,
) -> Trace:
    """Walk the graph once and turn what autograd holds into a Trace (`modules`: which module made
    each call's output nodes, from capture)."""
    roots = _check_outputs(outputs)
    with gc_paused():
        return _Builder(outputs, sources, names, mutations or [], modules or {}).build(roots, progress)


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


class _Builder:
    """One trace's worth of lookups: leaf labels, storages seen so far, forward positions."""

    def __init__(self, outputs: tuple[torch.Tensor, ...], sources: Sources | None, names: Names,
                 mutations: list[Mutation], modules: Modules) -> None:
        self.outputs = outputs
        self.modules = modules
        self.sources = sources
        self.names = names
        self.mutations = mutations
        self.output_keys = {storage_key(t) for t in outputs}
        self.leaves: dict[str, str] = {}  # leaf label -> description
        self.leaf_roles: dict[str, Role] = {}
        self.label_of: dict[Any, str] = {}  # leaf node -> its label (each leaf is looked up once)
        self.storages: dict[StorageKey, Storage] = {}
        self.position: dict[Any, int] = {}
        self.parameter_keys: dict[StorageKey, str] = {}  # storage of a leaf that gets a gradient -> its label
        self.backend = backend_of_outputs(outputs)  # "meta" / "fake": a trace without data

    def build(self, roots: list[Any], progress: bool | None) -> Trace:
        everything = walk(roots)
        graph_nodes = sorted((n for n in everything if not is_leaf_node(n)), key=lambda n: n._sequence_nr())
        keeper.keep(graph_nodes)
        self.position = {n: i for i, n in enumerate(graph_nodes)}
        # leaves that get gradients: a residual in their storage is theirs (e.g. W.t())
        self.parameter_keys = {storage_key(n.variable): self.leaf_label(n) for n in everything if is_leaf_node(n)}
        nexts = [g.next_functions for g in graph_nodes]
        owners = _owners(graph_nodes, nexts, self.position, self.sources) if self.sources is not None else None
        sources = [self.sources[o] if o >= 0 else (None, None) for o in owners] if owners is not None else None
        modules = self.modules
        bar = Progress(len(graph_nodes), "tracing nodes", progress)
        nodes = []
        for i, gnode in enumerate(graph_nodes):
            bar.update(i)
            nodes.append(self.node(gnode, i, nexts[i], sources[i] if sources else (None, None)))
            if owners is not None and modules:
                nodes[-1].module = modules.get(owners[i])
        bar.close()
        output_names = [self.names.get(storage_key(t), (None,))[0] if t.layout == torch.strided else None
                        for t in self.outputs]
        return Trace(nodes, list(self.storages.values()), self.outputs, graph_nodes, self.leaves,
                     self.sources is not None, mutations=list(self.mutations), leaf_roles=self.leaf_roles,
                     output_names=output_names, without_data=self.backend)

    def leaf_label(self, leaf_node: Any) -> str:
        """The user's name for a leaf (`W`, `model.fc.weight`), else `leaf0`, `leaf1`, ..."""
        label = self.label_of.get(leaf_node)
        if label is not None:
            return label
        var = leaf_node.variable
        label, named_param = self.names.get(storage_key(var), (None, False))
        label = label or f"leaf{len(self.leaves)}"
        if label not in self.leaves:
            role = _leaf_role(var, named_param)
            self.leaf_roles[label] = role
            self.leaves[label] = f"{role.value} {tuple(var.shape)} {_dtype_text(var.dtype)}"
        self.label_of[leaf_node] = label
        return label

    def node(self, gnode: Any, i: int, nexts: tuple[tuple[Any, int], ...],
             source: tuple[str | None, str | None]) -> Node:
        """One forward op with its residuals (`nexts`: its next_functions; `source`: line and call)."""
        position = self.position
        where, call = source
        inputs = tuple(position[n] if n in position else self.leaf_label(n) for n, _ in nexts if n is not None)
        name = gnode.name()
        by_slot = _rules_of(type(gnode), name, len(nexts))
        node = Node(name, op_name(gnode), i, where, call, inputs,
                    attributes=attributes(gnode), described=by_slot is not None,
                    needs=tuple(n is not None for n, _ in nexts))
        node.residuals = [self.residual(node, gnode, saved, by_slot) for saved in saved_slots(gnode)]
        if self.backend is not None:
            node.note = note_for(node, self.backend)
        return node

    def residual(self, node: Node, gnode: Any, saved: SavedSlot, by_slot: dict[str, str] | None) -> Residual:
        """One saved tensor: its size, storage, role and the rule that reads it."""
        t = saved.tensor
        key = storage_key(t) if t is not None and t.layout == torch.strided else None
        role, from_node, from_name, kind = self.role(saved.slot, t, gnode, key)
        storage = self.storage(key, t) if key is not None else None
        version, saved_version, modified_by = t._version if t is not None else None, None, ()
        if saved.status is Status.MODIFIED:
            version, saved_version, modified_by = self.modification(saved.error or "", key, version)
        residual = Residual(
            node=node, slot=saved.slot,
            shape=tuple(t.shape) if t is not None else None,
            dtype=_dtype_text(t.dtype) if t is not None else None,
            device=device_text(t.device) if t is not None else None,
            nbytes=visible_nbytes(t) if t is not None else None,
            storage=storage, role=role, from_node=from_node, from_name=from_name,
            rule=rules.rule_text(saved.slot, by_slot),
            place=saved.place, hook=saved.hook, status=saved.status,
            version=version, saved_version=saved_version, modified_by=modified_by,
            preview=_preview(t), error=saved.error, kind=kind,
        )
        if storage is not None:
            storage.residuals.append(residual)
        return residual

    def storage(self, key: StorageKey, t: torch.Tensor) -> Storage:
        """The allocation behind a residual, made once per allocation."""
        storage = self.storages.get(key)
        if storage is not None:
            return storage
        parameter_keys = self.parameter_keys
        var, is_param = self.names.get(key, (parameter_keys.get(key), key in parameter_keys))
        is_param = is_param or key in parameter_keys or (t.is_leaf and t.requires_grad)
        leaf_label = parameter_keys.get(key)
        leaf_role = self.leaf_roles.get(leaf_label) if leaf_label is not None else None
        if leaf_role is None and t.is_leaf and t.requires_grad:
            leaf_role = _leaf_role(t, is_param)
        storage = self.storages[key] = Storage(
            key, storage_nbytes(t), device_text(t.device), names=(var,) if var else (), is_parameter=is_param,
            is_output=key in self.output_keys, weak=weak_ref(t), leaf_role=leaf_role,
        )
        return storage

    def modification(self, error: str, key: StorageKey | None,
                     version: int | None) -> tuple[int | None, int | None, tuple[Mutation, ...]]:
        """(version now, version when saved, the in-place calls that bumped it): the versions from
        PyTorch's own message, the calls from what capture saw."""
        saved_version = None
        found = _VERSIONS.search(error)
        if found:
            version, saved_version = int(found.group(1)), int(found.group(2))
        return version, saved_version, tuple(m for m in self.mutations if m.storage == key) if key else ()

    def role(self, slot: str, t: torch.Tensor | None, gnode: Any,
             key: StorageKey | None) -> tuple[str, int | None, str | None, Role]:
        """(the role in words, the node that made the value, else the leaf's name, the Role)."""
        position = self.position
        if t is None:
            return "unknown (not held)", None, None, Role.INTERMEDIATE
        producer = t.grad_fn
        if producer is not None and producer is not gnode and producer not in position and t._version > 0:
            return "modified in place after it was saved", None, None, Role.INTERMEDIATE
        var, is_param = self.names.get(key, (None, False)) if key is not None else (None, False)
        made = Role.OUTPUT if key in self.output_keys else Role.INTERMEDIATE
        if producer is gnode or slot.startswith("result"):
            return f"output of #{position[gnode]} {gnode.name()} (this node)", position[gnode], None, made
        if producer is None:
            if t.requires_grad or is_param or _is_parameter(t):
                role = _leaf_role(t, is_param)
                label = var or self.parameter_keys.get(key) if key is not None else var
                return (f"{role.value} {var}" if var else role.value), None, label, role
            if var:
                return f"constant {var}", None, var, Role.CONSTANT
            if is_custom_function(gnode):  # made inside a custom/compiled forward, which ran without grad
                return "made inside the function's forward", None, None, Role.INTERMEDIATE
            return "constant (no grad)", None, None, Role.CONSTANT
        if producer in position:
            return f"output of #{position[producer]} {producer.name()}", position[producer], None, made
        return "intermediate (made outside the traced graph)", None, None, Role.INTERMEDIATE


def _owners(graph_nodes: list[Any], nexts: list[tuple[tuple[Any, int], ...]], position: dict[Any, int],
            sources: Sources) -> list[int]:
    """The call each node belongs to (its output node's sequence number, -1: none seen), in forward
    order; it gives the node its source line, call and module. The recorder saw each call's output
    nodes; a node a call made on the way (e.g. the `t` inside `linear`) gets the source of the
    first call, in forward order, whose outputs lead to it through nodes no earlier call made:
    consumers run later, so one pass from the last node back settles every node."""
    n = len(graph_nodes)
    owner = [-1] * n  # the sequence number of the call output a node belongs to (-1: none seen)
    seq = [g._sequence_nr() for g in graph_nodes]
    for i in range(n - 1, -1, -1):
        mine = seq[i] if seq[i] in sources else owner[i]
        if mine < 0:
            continue
        owner[i] = mine
        for child, _ in nexts[i]:
            j = position.get(child) if child is not None else None
            if j is not None and seq[j] not in sources and (owner[j] < 0 or mine < owner[j]):
                owner[j] = mine
    return owner


def _is_parameter(t: torch.Tensor) -> bool:
    """isinstance(t, nn.Parameter) without Parameter's metaclass check for plain tensors (slow)."""
    return type(t) is not torch.Tensor and isinstance(t, torch.nn.Parameter)


def _leaf_role(t: torch.Tensor, named_parameter: bool) -> Role:
    """PARAMETER for an nn.Parameter or a module's named parameter, else INPUT (a leaf with grad)."""
    return Role.PARAMETER if named_parameter or _is_parameter(t) else Role.INPUT


@functools.cache
def _rules_of(kind: type, name: str, n_inputs: int) -> dict[str, str] | None:
    """slot -> the formulas that read it, for a node type (None: not in the rule table)."""
    if not rules.described(name):
        return None
    return rules.rules_by_slot(name, n_inputs, frozenset(slot_names(kind)[0]))


_DTYPE_TEXT: dict[torch.dtype, str] = {}


def _dtype_text(dtype: torch.dtype) -> str:
    """`float32` for torch.float32 (cached: str() of a dtype is slow next to a dict lookup)."""
    text = _DTYPE_TEXT.get(dtype)
    if text is None:
        text = _DTYPE_TEXT[dtype] = str(dtype).removeprefix("torch.")
    return text


def _preview(t: torch.Tensor | None) -> str | None:
    """The values of a small tensor as text (kept as text, so the trace holds no tensor)."""
    if t is None or t.numel() > 4 or t.layout != torch.strided or not has_data(t):
        return None
    try:
        values = t.tolist()
    except RuntimeError:  # e.g. a real scalar read while a FakeTensorMode is active
        return None
    if not isinstance(values, list):  # a 0-dim tensor
        return f"{values:.4g}" if isinstance(values, float) else str(values)
    flat = t.detach().reshape(-1).tolist() if t.dim() > 1 else values
    return "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat) + "]"
