"""Building a trace: walk autograd's graph once and turn what it holds (nodes, saved slots,
storages) into the record's columns (rows.py): one list per field, filled in one pass, what does
not change per node type read once (its name, op, rules, slots), each getter read once.
Nothing here runs while the forward runs."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from bisect import bisect_right
from itertools import accumulate, chain, compress, count, islice, repeat
from operator import attrgetter, gt, is_, is_not, itemgetter, not_
from types import CodeType
from typing import Any, Protocol

import torch

from . import derivatives, keeper, rules
from .errors import NoHistoryError, NoStorageError, NotATensorError
from .frames import Names, cell_counts, where_at
from .internals import (
    SEQUENCE_NR,
    attribute_slots,
    custom_forward_name,
    require,
    shared_hook_dict,
    tensor_attributes,
)
from .internals import VERSION as _VERSION
from .internals import version as tensor_version
from .keeper import gc_paused
from .live import Live, is_leaf_node_type, walk
from .progress import Progress
from .reader import Node, _Data
from .rows import (
    CachedValue,
    Formatted,
    HeldIn,
    Mutation,
    NodeColumns,
    Record,
    ResidualColumns,
    Role,
    Status,
    StorageColumns,
)
from .saved import (
    CHECKPOINT_RULE,
    attributes,
    checkpoint_cache,
    checkpoint_kept,
    is_custom_function,
    saved_values,
    slot_names,
)
from .storage import StorageKey, device_text, has_data, storage_key, storage_nbytes, storage_weak_ref
from .trace import Trace
from .without_data import backend_of_outputs, note_for

# a call seen under capture: its first sequence number -> (the number after its last, the user's code
# and the offset it was at (frames.where_at reads the line at build), call name); every node whose
# sequence number is in [first, after) was made by that call
Sources = dict[int, tuple[int, CodeType | None, int, str]]


class Modules(Protocol):
    """A call's first sequence number -> the module whose forward made it (its label): a dict, or
    capture's labels made when asked."""

    def get(self, seq: int, /) -> str | None: ...

    def __bool__(self) -> bool: ...


class Mutations(list):  # type: ignore[type-arg]
    """The in-place calls a recorder saw (Mutation), in order, and after each the sequence number the
    next autograd node would take (`ends`; left empty where this torch cannot say)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[int] = []

    def since(self, first: int) -> list[Mutation]:
        """The calls made once the node numbered `first` was (a call that made it included; one that made
        no node before it is older than all a graph starting there saved); all where the numbers are not known."""
        if len(self.ends) != len(self):
            return list(self)
        return self[bisect_right(self.ends, first):]


_MOVED_FROM = 8192  # nodes: a smaller graph's rows are transposed once, at the end (_Table)
_MOVED_EVERY = 512  # rows: a larger graph's are moved by column when this many are made


class _Table:
    """A table made a row at a time and kept by column: the rows made so far (`rows`, plain tuples),
    moved into one list per field every few hundred (`move_some`) while they are still in the cache.
    Transposing 100k rows at the end reads each row once per field long after it was made: ~9 % of a
    100k-node trace went to it, most of it waiting for memory."""

    __slots__ = ("rows", "moved", "_columns")

    def __init__(self, width: int) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.moved = 0  # rows moved into the columns so far (row k is rows[k - moved] once moved <= k)
        self._columns: list[list[Any]] = [[] for _ in range(width)]

    def __len__(self) -> int:
        return self.moved + len(self.rows)

    def move_some(self, at_least: int) -> None:
        """Move the rows into the columns when there are `at_least` of them."""
        rows = self.rows
        if len(rows) >= at_least:
            for column, values in zip(self._columns, zip(*rows)):
                column.extend(values)
            self.moved += len(rows)
            rows.clear()

    def columns(self) -> list[tuple[Any, ...]]:
        """The whole table, one tuple per field."""
        if not self.moved:  # all rows still as rows (a small table: it fits in the cache): one transposition
            return [*zip(*self.rows)] if self.rows else [() for _ in self._columns]
        self.move_some(1)
        return [tuple(column) for column in self._columns]


_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def op_name(node: Any) -> str:
    """The forward op behind a backward node: MulBackward0 -> mul, NativeLayerNormBackward0 -> layer_norm."""
    if is_custom_function(node):
        return custom_forward_name(node)
    return _op_from_name(node.name())


@functools.cache
def _op_from_name(name: str) -> str:
    base = re.sub(r"Backward\d*$", "", name.split("::")[-1])
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    return snake.removeprefix("native_")


def build_trace(
    outputs: tuple[torch.Tensor, ...],
    sources: Sources | None,
    names: Names,
    mutations: list[Mutation] | None = None,
    progress: bool | None = None,
    modules: Modules | None = None,
    kept: tuple[bool, ...] = (),
    exact: bool = False,
    unhooked: bool = False,
) -> Trace:
    """Walk the graph once and turn what autograd holds into a Trace (`modules`: which module made
    each call's output nodes, from capture; `kept`: per output, whether the trace holds it
    strongly, as the only holder of a temporary output; `exact`: the sources' ranges are the sequence
    numbers each call took, read from the counter, so no two overlap; `unhooked`: no value saved by
    the sources' calls carries a saved-tensor hook, capture.HookWatch)."""
    roots = _check_outputs(outputs)
    with gc_paused():
        builder = _Builder(outputs, sources, names, mutations or [], modules or {})
        builder.kept, builder.exact, builder.unhooked = kept, exact, unhooked
        try:
            return builder.build(roots, progress)
        except NotImplementedError as err:  # PyTorch: "Cannot access storage of TensorWrapper"
            if "Cannot access storage" not in str(err):
                raise
            raise NoStorageError(
                "this graph's saved values have no storage to read: a graph built inside a torch.func "
                "transform (grad, vjp, vmap) holds functorch's wrapper tensors. Trace the same computation "
                "outside the transform: x.requires_grad_(), then tk.trace(loss)."
            ) from err


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
    """One trace's worth of lookups: leaf labels, storages seen so far, forward positions, and
    the record's rows as they are made."""

    def __init__(self, outputs: tuple[torch.Tensor, ...], sources: Sources | None, names: Names,
                 mutations: list[Mutation], modules: Modules) -> None:
        self.outputs = outputs
        self.modules = modules
        self.sources = sources
        self.names = names
        self.mutations = mutations  # the in-place calls since this graph's first node (see capture)
        self.output_keys = {storage_key(t) for t in outputs}
        self.leaves: dict[str, str] = {}  # leaf label -> description
        self.leaf_texts: dict[tuple[Any, ...], str] = {}  # (role, shape, dtype) -> a leaf's description
        self.leaf_roles: dict[str, Role] = {}
        self.label_of: dict[Any, str] = {}  # leaf node -> its label (each leaf is looked up once)
        self.storage_index: dict[StorageKey, int] = {}
        self.storages = _Table(len(StorageColumns._fields))  # one tuple per storage (its residuals: made when read)
        self.weaks: list[int] = []  # one weak reference per storage
        self.shapes: dict[Any, tuple[tuple[int, ...], int]] = {}  # each shape seen: one plain tuple, its numel
        self.residuals = _Table(len(ResidualColumns._fields))  # one plain tuple per residual, then by column
        self.position: dict[Any, int] = {}
        self.parameter_keys: dict[StorageKey, str] = {}  # storage of a leaf that gets a gradient -> its label
        self.claimed: set[Any] = set()  # those keys and the names' (build())
        self.backend = backend_of_outputs(outputs)  # "meta" / "fake": a trace without data
        self.kept: tuple[bool, ...] = ()  # per output: held strongly by the trace (a temporary)
        self.exact = False  # the sources' ranges read from the sequence counter (build_trace)
        self.unhooked = False  # no value saved by the sources' calls carries a hook (build_trace; build(): and
        # those calls made every node): fill() then reads no raw slot to find out
        self.frames: list[Any] = []  # checkpointed regions whose kept inputs are rows already
        self.inputs: dict[Any, int | str] = {}  # a node's input: graph node -> its index, leaf node -> its label
        self.flat_inputs: tuple[int | str | None, ...] = ()  # every node's inputs, in order (build())
        self.input_at: list[int] = []  # where each node's are in flat_inputs
        self.with_none: set[int] | frozenset[int] = frozenset()  # the nodes with an input that gets no gradient
        self.nodes = _Table(8)  # one plain tuple per node (its name first; no source or module yet), then by column
        self.recomputed = False  # whether a residual is recomputed (a checkpointed region's)
        # fill(): role() of a leaf's value, by (storage key, requires_grad, type)
        self.value_roles: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.needs_seen: dict[tuple[bool, ...], tuple[bool, ...]] = {}  # each `needs` but all-True, kept once

    def build(self, roots: list[Any], progress: bool | None) -> Trace:
        edges: dict[Any, tuple[tuple[Any, int], ...]] = {}
        leaves, ops = _leaves_and_ops(walk(roots, edges))
        graph_nodes, seq, unique = _forward_order(ops)
        keeper.keep(graph_nodes, self.outputs)
        self.position = dict(zip(graph_nodes, range(len(graph_nodes))))
        # leaves that get gradients: a residual in their storage is theirs (e.g. W.t())
        keys = self.parameter_keys
        for n in leaves:
            var = n.variable
            key = storage_key(var)
            keys[key] = self.leaf_label(n, var, key)
        self.claimed = keys.keys() | self.names.keys()  # storages of leaves with gradients, and named ones
        self.inputs = {**self.position, **self.label_of, None: None}  # graph node -> its index, leaf node -> its label
        nexts = list(map(edges.__getitem__, graph_nodes))
        del edges
        # every node's inputs in one C-level pass over all edges (node i's: flat[at[i]:at[i] + len(nexts[i])])
        self.flat_inputs = tuple(map(self.inputs.__getitem__, map(_FIRST, chain.from_iterable(nexts))))
        self.input_at = [0, *accumulate(map(len, nexts))]
        if None in self.flat_inputs:  # the nodes with an input that gets no gradient (None), found in C
            at = self.input_at
            nones = compress(count(), map(is_, self.flat_inputs, repeat(None)))  # where each None is
            self.with_none = {bisect_right(at, k) - 1 for k in nones}
        owners, made_all, calls = (None, False, None) if self.sources is None else \
            _owners(seq, self.sources, nexts, self.position, self.exact)
        # (recorded in one thread, every node made by its calls, no two nodes with one number: none older)
        self.unhooked = self.unhooked and self.exact and made_all and unique
        if made_all and isinstance(self.mutations, Mutations):  # a capture kept over a long loop: this graph's
            self.mutations = self.mutations.since(seq[0])  # (where every node was made under it, in its order)
        modules = self.modules
        n = len(graph_nodes)
        bar = Progress(n, "tracing nodes", progress)
        tables = (self.nodes, self.residuals, self.storages) if n >= _MOVED_FROM else ()
        step = max(1, n // 100)
        for start in range(0, n, step):  # the bar told once per 1 % of the nodes
            bar.update(start)
            self.fill(graph_nodes, nexts, start, min(start + step, n))
            for table in tables:  # a large graph's rows by column as they are made (_Table)
                table.move_some(_MOVED_EVERY)
        bar.close()
        node_columns = self.nodes.columns()
        if None in node_columns[2]:  # inputs fill() left to their slice of flat_inputs: made when read
            node_columns[2] = _inputs(node_columns[2], self.flat_inputs, self.input_at)
        node_columns[2:2] = _source_columns(owners, self.sources, n, calls)
        none = (None,) * n
        node_columns += [none, tuple(map(modules.get, owners)) if owners is not None and modules else none]
        output_names = [self.names.get(storage_key(t), (None,))[0] if t.layout == torch.strided else None
                        for t in self.outputs]
        position = self.position
        n_storages = len(self.storages)
        storages = self.storages.columns()
        residuals = ResidualColumns(*self.residuals.columns())
        storage_of = residuals.storage
        storages[3] = Formatted(lambda: _members(storage_of, n_storages))  # each storage's residuals, when read
        residuals = _formatted(residuals, node_columns[0])
        record = Record(
            NodeColumns(*node_columns), residuals, StorageColumns(*storages),
            tuple(self.leaves.items()), tuple(self.leaf_roles.items()),
            tuple((position.get(t.grad_fn), name) for t, name in zip(self.outputs, output_names)),
            self.sources is not None, tuple(self.mutations), self.backend, self.cache(graph_nodes))
        if self.backend is not None:
            record = _with_notes(record, self.backend)
        live = Live(self.outputs, seq if unique else None, self.kept,
                    shared_hook_dict(graph_nodes, seq) if unique else None)
        return Trace(record, live, weaks=tuple(self.weaks))

    def cache(self, graph_nodes: list[Any]) -> tuple[CachedValue, ...]:
        """What a selective-checkpoint policy keeps for the checkpointed regions (looked for only
        when a residual is recomputed: the regions' saved values carry checkpoint hooks)."""
        if not self.recomputed:
            return ()
        found, seen = [], set()
        for op, t in checkpoint_cache(graph_nodes):
            key = storage_key(t)
            if key not in seen:
                seen.add(key)
                found.append(CachedValue(op, tuple(t.shape), _dtype_text(t.dtype), storage_nbytes(t), key))
        return tuple(found)

    def leaf_label(self, leaf_node: Any, var: torch.Tensor, key: StorageKey) -> str:
        """The user's name for a leaf (`W`, `model.fc.weight`), else `leaf0`, `leaf1`, ... (`var`:
        its tensor, `key`: its storage key)."""
        label = self.label_of.get(leaf_node)
        if label is not None:
            return label
        label, named_param = self.names.get(key, (None, False))
        label = label or f"leaf{len(self.leaves)}"
        if label not in self.leaves:
            role = _leaf_role(var, named_param)
            self.leaf_roles[label] = role
            # made now: a symbolic size a later guard fixes must read as it was when traced
            described = (role, var.shape, var.dtype)
            try:  # one text per kind of leaf (a model's parameters are of a few shapes)
                text = self.leaf_texts.get(described)
            except TypeError:  # a symbolic size cannot be a key
                text, described = None, None
            if text is None:
                text = f"{role._value_} {tuple(var.shape)} {_dtype_text(var.dtype)}"
                if described is not None:
                    self.leaf_texts[described] = text
            self.leaves[label] = text
        self.label_of[leaf_node] = label
        return label

    def fill(self, graph_nodes: list[Any], nexts: list[tuple[tuple[Any, int], ...]], start: int, stop: int) -> None:
        """The nodes start .. stop - 1, the common case inline: a built-in node whose saved values the
        graph holds itself, plain strided tensors (what node(), residual() and role() would append, with
        each getter read once and fewer calls); any other node through node()."""
        types, position, okeys = _TYPES, self.position, self.output_keys
        rows, res, storage_rows = self.nodes.rows, self.residuals.rows, self.storages.rows  # (moved between calls)
        moved, storages_moved = self.residuals.moved, self.storages.moved
        index_setdefault, shapes, claimed = self.storage_index.setdefault, self.shapes, self.claimed
        names, value_roles = self.names, self.value_roles
        with_none, unhooked = self.with_none, self.unhooked
        require("saved_slots", "reading what an autograd node saved")  # (slots and attributes, read below)
        add_row, add_res, add_weak, add_storage = rows.append, res.append, self.weaks.append, storage_rows.append
        for i in range(start, stop):
            gnode, nx = graph_nodes[i], nexts[i]
            info = types.get((type(gnode), len(nx)))
            if info is None:  # a type not seen yet
                info = types[(type(gnode), len(nx))] = _type_info(gnode, len(nx))
            if info[1] is None:  # a custom Function
                self.node(gnode, i, nx)
                continue
            name, op, by_slot, rule_of, _, read_attributes, fill_slots, _, needs = info
            inputs = None  # (its slice of flat_inputs, made when the column is read: _inputs)
            if i in with_none:  # an input that gets no gradient: not an input, and `needs` says so
                needs, inputs, fill_slots = self.given(gnode, i, info)
            first = moved + len(res)
            # the raw slot of a node's first saved value tells whether its values carry hooks (all are packed under the
            # hooks active when it was made; an empty slot never is; one set by hand on a later slot is read through),
            # unless capture saw that none can (`unhooked`)
            probed = unhooked
            for slot, raw_attr, value_attr, result in fill_slots:
                try:
                    if not probed:
                        raw = getattr(gnode, raw_attr)
                        if raw is None:
                            continue
                        if type(raw) is tuple or type(raw) is list or raw.unpack_hook is not None:
                            break  # a list, or a hook: node() tells what each slot holds
                    t = getattr(gnode, value_attr)
                except RuntimeError:  # released (a list refuses even its raw read) or modified in place
                    break
                if t is None:
                    continue
                probed = True
                kind = type(t)
                cpu = kind is _TENSOR and t.is_cpu  # (then not meta: one getter less for the common value)
                plain = cpu or (kind is _TENSOR or kind is _PARAMETER_TYPE) and not t.is_meta
                try:  # (a tensor of another layout, sparse or mkldnn, has no storage to read: NotImplementedError)
                    storage_object = t.untyped_storage() if plain else None
                except NotImplementedError:
                    storage_object = None
                if storage_object is None:
                    if kind is tuple or kind is list:
                        break  # a list of saved tensors: node() reads each
                    self.residual(i, gnode, (slot, _LIVE, t, _GRAPH, None, None), None, {slot: rule_of[slot]}, name)
                    continue
                device = "cpu" if cpu or t.is_cpu else device_text(t.device)
                key = (device, storage_object.data_ptr())
                producer, out = t.grad_fn, key in okeys
                if producer is gnode or (producer is None and result):  # role(), inline: its output
                    role, from_node, from_name, made = _OUTPUT_OF_THIS, i, None, _MADE[out]
                elif producer is not None and (at := position.get(producer)) is not None and not result:
                    role, from_node, from_name, made = _OUTPUT_OF, at, None, _MADE[out]
                elif producer is None:  # a leaf's value, or a constant (not a result: above)
                    if not t.requires_grad and kind is _TENSOR and key not in names:  # role(), inline for a constant
                        role, from_node, from_name, made = _NO_GRAD_CONSTANT
                    else:  # role() once per storage and kind of value (a parameter is saved by node after node)
                        role_key = (key, t.requires_grad, kind)
                        found = value_roles.get(role_key)
                        if found is None:
                            found = value_roles[role_key] = self.role(slot, t, gnode, key, None, 0, name)
                        role, from_node, from_name, made = found
                else:
                    role, from_node, from_name, made = self.role(slot, t, gnode, key, producer, _VERSION(t), name)
                new = storages_moved + len(storage_rows)
                storage = index_setdefault(key, new)  # (one lookup: the row is made next where it is new)
                if storage == new:
                    if (producer is not None or not t.requires_grad) and key not in claimed:
                        # an op's output, or a value that gets no gradient, that nobody named (new_storage's row)
                        add_storage((key, storage_object.nbytes(), device, None, (), False, out, None))
                        add_weak(storage_weak_ref(storage_object))
                    else:
                        storage = self.new_storage(key, t, device, storage_object, producer)
                size, dtype = t.shape, t.dtype
                shape, numel = shapes.get(size) or _new_shape(shapes, size)  # each shape seen: one tuple, its numel
                text, itemsize = _DTYPES.get(dtype) or _new_dtype(dtype)
                if numel > 4:
                    values = None
                else:  # _values(t), inline where it has at most one dimension
                    try:
                        values = t.tolist() if len(shape) < 2 else _values(t)
                    except RuntimeError:  # e.g. a real scalar read while a FakeTensorMode is active
                        values = None
                add_res((i, slot, shape, text, device, numel * itemsize, storage, role, rule_of[slot], from_node,
                         from_name, _GRAPH, _LIVE, _VERSION(t), None, None, values, (), made, None))
            else:
                attrs = () if read_attributes is None else _attribute_values(gnode, read_attributes)
                add_row((name, op, inputs, first, moved + len(res) - first, attrs, by_slot is not None, needs))
                continue
            del res[first - moved:]  # a slot that is not a plain held tensor: the node again, each slot read as it is
            self.node(gnode, i, nx)

    def given(self, gnode: Any, i: int, info: tuple[Any, ...]) -> tuple[tuple[bool, ...], tuple[Any, ...], Any]:
        """(`needs`, the inputs that get a gradient, fill()'s slots) of node i, which has an input that gets
        none: without the slots PyTorch leaves empty for that pattern (x * c saves no x; maybe none left)."""
        needs, inputs = _given(self.flat_inputs[self.input_at[i]:self.input_at[i + 1]], self.needs_seen.setdefault)
        fill_slots = info[7].get(needs)
        if fill_slots is None:
            fill_slots = _slots_for(gnode, info, needs)
        return needs, inputs, fill_slots

    def node(self, gnode: Any, i: int, nexts: tuple[tuple[Any, int], ...]) -> None:
        """One forward op with its residuals, appended as a plain tuple, each slot read as it is (hooks,
        lists, released or modified values, checkpoints; fill() takes the common node): `nexts` its
        next_functions; its line, call, note and module are columns of their own."""
        lookup = self.inputs
        inputs = tuple([lookup[n] for n, _ in nexts if n is not None])
        kind = type(gnode)
        info = _TYPES.get((kind, len(nexts)))
        if info is None:
            info = _TYPES[(kind, len(nexts))] = _type_info(gnode, len(nexts))
        name, op, by_slot, rule_of, tensor_slots, read_attributes, _, _, needs = info
        if len(inputs) != len(nexts):  # an input that gets no gradient (None): not an input, and `needs` says so
            needs = tuple([n is not None for n, _ in nexts])
            needs = self.needs_seen.setdefault(needs, needs)
        if op is None:  # a custom Function: its name is its class's
            op = op_name(gnode)
            attrs = _plain_attributes(attributes(gnode))
        elif read_attributes is not None:
            require("saved_slots", "reading what an autograd node saved")
            attrs = _attribute_values(gnode, read_attributes)
        else:
            attrs = ()
        first = len(self.residuals)
        recomputed = False
        for saved in saved_values(gnode, tensor_slots):
            self.residual(i, gnode, saved, by_slot, rule_of, name)
            recomputed = recomputed or saved[3] is _RECOMPUTED
        self.recomputed = self.recomputed or recomputed
        if recomputed:  # the first node of a checkpointed region: what the checkpoint keeps for it
            for kept in checkpoint_kept(gnode, self.frames):
                self.residual(i, gnode, (kept.slot, kept.status, kept.tensor, kept.place, kept.error, kept.hook),
                              None, _CHECKPOINT_RULES)
        self.nodes.rows.append((name, op, inputs, first, len(self.residuals) - first, attrs, by_slot is not None,
                                needs))

    def residual(self, node: int, gnode: Any, saved: tuple[Any, ...], by_slot: dict[str, str] | None,
                 rule_of: dict[str, str], name: str | None = None) -> None:
        """One saved tensor (saved.saved_values' tuple): its size, storage, role and the rule that reads
        it (`name`: the saving node's name, when the caller has it)."""
        slot, status, t, place, error, hook = saved
        res = self.residuals.rows
        rule = rule_of.get(slot) or rule_of.get("*")
        if rule is None:
            rule = rules.rule_text(slot, by_slot)
        if t is None:
            version = saved_version = key = None
            modified_by: tuple[Mutation, ...] = ()
            if status is _MODIFIED:
                version, saved_version, modified_by = self.modification(error or "", None, None)
            res.append((node, slot, None, None, None, None, None, "unknown (not held)", rule, None, None, place,
                        status, version, error, saved_version, None, modified_by, _INTERMEDIATE, hook))
            return
        device = "cpu" if t.is_cpu else device_text(t.device)
        key = storage_object = None
        if t.layout == _STRIDED:
            kind = type(t)
            if (kind is _TENSOR or kind is _PARAMETER_TYPE) and not t.is_meta:
                storage_object = t.untyped_storage()
                key = (device, storage_object.data_ptr())
            else:
                key = storage_key(t)
        producer = t.grad_fn
        version = tensor_version(t)
        role, from_node, from_name, made = self.role(slot, t, gnode, key, producer, version, name)
        storage = None
        if key is not None:
            storage = self.storage_index.get(key)
            if storage is None:
                storage = self.new_storage(key, t, device, storage_object, producer)
        saved_version, modified_by = None, ()
        if status is _MODIFIED:
            version, saved_version, modified_by = self.modification(error or "", key, version)
        numel, dtype = t.numel(), t.dtype
        # a plain tensor with a storage read above is strided and has data: no checks to repeat
        preview = None if numel > 4 else _values(t) if storage_object is not None else _preview(t)
        res.append((node, slot, tuple(t.shape), _dtype_text(dtype), device,
                    numel * t.element_size(), storage, role, rule, from_node, from_name, place, status, version,
                    error, saved_version, preview, modified_by, made, hook))

    def new_storage(self, key: StorageKey, t: torch.Tensor, device: str | None, storage_object: Any,
                    producer: Any) -> int:
        """A row for an allocation not seen yet (`device`, `storage_object`, `producer`: what the
        caller already read of `t`, its storage and grad_fn)."""
        leaf_label = self.parameter_keys.get(key)
        named = self.names.get(key)
        if producer is not None and leaf_label is None and named is None:  # an op's output nobody named
            var, is_param, leaf_role = None, False, None
        else:
            var, is_param = named if named is not None else (leaf_label, leaf_label is not None)
            grad_leaf = producer is None and t.requires_grad  # t.is_leaf is `grad_fn is None`
            is_param = is_param or leaf_label is not None or grad_leaf
            leaf_role = self.leaf_roles.get(leaf_label) if leaf_label is not None else None
            if leaf_role is None and grad_leaf:
                leaf_role = _leaf_role(t, is_param)
        if storage_object is None:
            storage_object = t.untyped_storage()
        index = self.storage_index[key] = len(self.storages)
        self.storages.rows.append((key, storage_object.nbytes(), device or device_text(t.device), None,
                                  (var,) if var else (), bool(is_param), key in self.output_keys, leaf_role))
        self.weaks.append(storage_weak_ref(storage_object))
        return index

    def modification(self, error: str, key: StorageKey | None,
                     version: int | None) -> tuple[int | None, int | None, tuple[Mutation, ...]]:
        """(version now, version when saved, the in-place calls that bumped it): the versions from
        PyTorch's own message, the calls from what capture saw."""
        saved_version = None
        found = _VERSIONS.search(error)
        if found:
            version, saved_version = int(found.group(1)), int(found.group(2))
        return version, saved_version, tuple(m for m in self.mutations if m.storage == key) if key else ()

    def role(self, slot: str, t: torch.Tensor, gnode: Any, key: StorageKey | None,
             producer: Any, version: int, name: str | None = None) -> tuple[str | int, int | None, str | None, Role]:
        """(the role in words, or the code of words made when read: _OUTPUT_OF_THIS, _OUTPUT_OF; the
        node that made the value, else the leaf's name; the Role) of a held value `t` (`producer`: its
        grad_fn, `version`: its version; `name`: gnode's name)."""
        position = self.position
        if producer is not None:
            at = position.get(producer)
            if at is None and producer is not gnode and version > 0:
                return "modified in place after it was saved", None, None, _INTERMEDIATE
        made = _OUTPUT if key in self.output_keys else _INTERMEDIATE
        if producer is gnode or slot.startswith("result"):  # the words are made when read (_role_words)
            return _OUTPUT_OF_THIS, position[gnode], None, made
        if producer is not None:
            if at is not None:
                return _OUTPUT_OF, at, None, made
            return "intermediate (made outside the traced graph)", None, None, _INTERMEDIATE
        var, is_param = self.names.get(key, (None, False)) if key is not None else (None, False)
        if t.requires_grad or is_param or _is_parameter(t):
            role = _leaf_role(t, is_param)
            label = var or self.parameter_keys.get(key) if key is not None else var
            return (f"{role._value_} {var}" if var else role._value_), None, label, role
        if var:
            return f"constant {var}", None, var, _CONSTANT
        if is_custom_function(gnode):  # made inside a custom/compiled forward, which ran without grad
            return "made inside the function's forward", None, None, _INTERMEDIATE
        return _NO_GRAD_CONSTANT


def _leaves_and_ops(nodes: list[Any]) -> tuple[list[Any], list[Any]]:
    """(the leaf nodes, the op nodes) of a walk, in its order: is_leaf_node asked once per node type."""
    leaf_kinds = {kind for kind in set(map(type, nodes)) if is_leaf_node_type(kind)}
    if not leaf_kinds:
        return [], nodes
    is_leaf = list(map(leaf_kinds.__contains__, map(type, nodes)))
    return list(compress(nodes, is_leaf)), list(compress(nodes, map(not_, is_leaf)))


def _forward_order(ops: list[Any]) -> tuple[list[Any], list[int], bool]:
    """The op nodes in forward order (by sequence number), their sequence numbers, each read once, and
    whether no two share one (the nodes of other threads may: then sorted by it, in walk order where equal)."""
    numbers = list(map(SEQUENCE_NR, ops))
    if all(map(gt, numbers, islice(numbers, 1, None))):  # walked newest first (a chain): no sort
        numbers.reverse()
        return ops[::-1], numbers, True
    by_number = dict(zip(numbers, ops))
    if len(by_number) == len(ops):
        seq = sorted(by_number)
        return list(map(by_number.__getitem__, seq)), seq, True
    order = sorted(range(len(ops)), key=numbers.__getitem__)
    return [ops[i] for i in order], [numbers[i] for i in order], False


def _owners(seq: list[int], sources: Sources, nexts: list[tuple[tuple[Any, int], ...]],
            position: dict[Any, int], exact: bool = False) -> tuple[list[int], bool, list[Any] | None]:
    """The call each node belongs to (its first sequence number, -1: none seen), in forward order
    (`seq`: the nodes' sequence numbers), whether a recorded call made every node, and each node's
    entry in `sources` where that was read on the way (else None); the call gives the node its source
    line, call and module. A node belongs to the call whose range of numbers holds its own (the call
    made it); a node no call made (before capture began, or where this torch cannot say which
    numbers a call took) to the first call, in forward order, that leads to it through such nodes:
    consumers run later, so one pass from the last node back settles them."""
    if exact:
        calls = list(map(sources.get, seq))
        if not any(map(is_, calls, repeat(None))):
            # each node the first number a call took (a call per node, as scalar code makes): its own call
            # (`exact`: ranges read from the counter never overlap; one thread records, in order)
            return list(seq), True, calls
    made_by: dict[int, int] = {}  # sequence number -> the first number of the call that took it
    lo = min(seq) if seq else 0
    for first, (after, _, _, _) in reversed(sources.items()):  # the earliest call wins where ranges overlap
        if after <= lo:  # calls come in order: this one and all before it made nodes older than the graph
            break  # (a capture kept over a long loop: a trace reads its own calls, not every call since)
        if after == first + 1:
            made_by[first] = first
        else:
            made_by.update(dict.fromkeys(range(first, after), first))
    get = made_by.get
    owner = [get(s, -1) for s in seq]
    if -1 not in owner:
        return owner, True, None
    made = [o >= 0 for o in owner]
    for i in range(len(seq) - 1, -1, -1):
        mine = owner[i]
        if mine < 0:
            continue
        for child, _ in nexts[i]:
            j = position.get(child) if child is not None else None
            if j is not None and not made[j] and (owner[j] < 0 or mine < owner[j]):
                owner[j] = mine
    return owner, False, None


def _source_columns(owners: list[int] | None, sources: Sources | None, n: int,
                    calls: list[Any] | None = None) -> list[Any]:
    """The source and call columns (`owners`: each node's call, _owners; `calls`: their entries in
    `sources`, where _owners read them): each line made text when the column is first read, with
    notebook cells' execution counts as they are now."""
    if owners is None or sources is None:
        return [(None,) * n, (None,) * n]
    # each node's call as it is now (capture goes on adding to its own): only these, so a trace kept
    # per step of a long loop does not keep every call capture saw before
    if calls is None:
        calls = list(map(sources.get, owners))  # (None for -1: a node no call made)
    counts = cell_counts()
    return [Formatted(lambda: _lines(calls, counts)),
            Formatted(lambda: [call[3] if call is not None else None for call in calls])]


def _lines(calls: list[tuple[int, CodeType | None, int, str] | None], counts: dict[str, int]) -> list[str | None]:
    """Each node's line as text (`calls`: its call's entry in capture's sources, None for none)."""
    texts: dict[tuple[int, int], str] = {}  # each place's text, made once
    return [where_at(texts, call[1], call[2], counts) if call is not None else None for call in calls]


def _formatted(columns: Any, names: tuple[str, ...]) -> Any:
    """The residual columns with the role words and the previews made when first read (`names`: the
    nodes' names)."""
    roles, from_node, previews = columns.role, columns.from_node, columns.preview
    return columns._replace(role=Formatted(lambda: _role_words(roles, from_node, names)),
                            preview=Formatted(lambda: map(_preview_text, previews)))


def _inputs(given: tuple[tuple[Any, ...] | None, ...], flat: tuple[Any, ...], at: list[int]) -> Formatted:
    """The inputs column, made when first read (`given`: a node's inputs, None for its slice of `flat`,
    every node's inputs in order, node i's from at[i])."""
    return Formatted(lambda: [flat[at[i]:at[i + 1]] if ins is None else ins for i, ins in enumerate(given)])


def _members(storage_of: tuple[int | None, ...], n: int) -> list[tuple[int, ...]]:
    """Each storage's residuals (`storage_of`: each residual's storage, `n`: how many storages)."""
    members: list[list[int]] = [[] for _ in range(n)]
    for j, k in enumerate(storage_of):
        if k is not None:
            members[k].append(j)
    return [tuple(m) for m in members]


def _with_notes(record: Record, backend: str) -> Record:
    """The record with each node's note on where `backend` runs another kernel than a real device."""
    data = _Data(record, None, None)
    notes = tuple(note_for(Node(data, i), backend) for i in range(record.n_nodes))
    return dataclasses.replace(record, node_columns=record.node_columns._replace(note=notes), _rows={})


def _plain(value: Any) -> Any:
    """A saved attribute as plain data: numbers, text, None and tuples of them as they are; the rest as text."""
    kind = type(value)
    if value is None or kind in _ATOMS:
        return value
    if (kind is tuple or kind is list) and _ATOM_TYPES.issuperset(map(type, value)):  # e.g. sizes: as they are
        return value if kind is tuple else tuple(value)
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    for base in (bool, int, float, str):  # subclasses (an IntEnum, a str enum) as their plain value
        if isinstance(value, base):
            return base(value)
    return str(value)


_ATOMS = (bool, int, float, str, type(None))
_ATOM_TYPES = frozenset(_ATOMS)


def _plain_attributes(attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return _plain_values(tuple(attrs.items())) if attrs else ()


def _plain_values(pairs: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """(slot, value) pairs with each value plain (_plain): the pairs as they are when every value is
    (numbers, text, None, and tuples of them: sizes and strides)."""
    for _, v in pairs:
        if type(v) not in _ATOM_TYPES and (type(v) is not tuple or not _ATOM_TYPES.issuperset(map(type, v))):
            return tuple([(k, v if type(v) in _ATOMS else _plain(v)) for k, v in pairs])
    return pairs


def _is_parameter(t: torch.Tensor) -> bool:
    """isinstance(t, nn.Parameter) without Parameter's metaclass check for plain tensors (slow)."""
    return type(t) is not torch.Tensor and isinstance(t, torch.nn.Parameter)


def _leaf_role(t: torch.Tensor, named_parameter: bool) -> Role:
    """PARAMETER for an nn.Parameter or a module's named parameter, else INPUT (a leaf with grad)."""
    return _PARAMETER if named_parameter or _is_parameter(t) else _INPUT


# enum members as module names: a hot loop reads them without the enum class's attribute lookup
_OUTPUT, _INTERMEDIATE, _CONSTANT, _PARAMETER, _INPUT = (Role.OUTPUT, Role.INTERMEDIATE, Role.CONSTANT, Role.PARAMETER,
                                                         Role.INPUT)
_MODIFIED, _RECOMPUTED, _LIVE, _GRAPH = Status.MODIFIED, HeldIn.RECOMPUTED, Status.LIVE, HeldIn.GRAPH
_STRIDED, _TENSOR, _PARAMETER_TYPE = torch.strided, torch.Tensor, torch.nn.Parameter
_ALL_NEEDED = tuple((True,) * n for n in range(8))  # `needs` of a node whose every input gets a gradient
_FIRST = itemgetter(0)  # a next_functions pair's node
_GIVEN = functools.partial(is_not, None)  # _GIVEN(x): x is not None (an input that gets a gradient)
_FIRST_ONLY, _SECOND_ONLY, _NEITHER = (True, False), (False, True), (False, False)
_MADE = (_INTERMEDIATE, _OUTPUT)  # an op's output's Role, by whether it is a traced output's storage
_CHECKPOINT_RULES = {"*": CHECKPOINT_RULE}  # the rule of every row a checkpoint keeps for recompute
_TYPES: dict[tuple[type, int], tuple[Any, ...]] = {}
_PAIRS_KEPT = 64  # per node type: the (name, value) pairs kept for values seen again (_attribute_values)
_NO_GRAD_CONSTANT = ("constant (no grad)", None, None, _CONSTANT)  # role() of a constant nobody named
_OUTPUT_OF_THIS, _OUTPUT_OF = 1, 2  # role codes: `output of #3 MulBackward0 (this node)`, `output of #3 MulBackward0`


def _given(inputs: tuple[Any, ...], same_needs: Any) -> tuple[tuple[bool, ...], tuple[Any, ...]]:
    """(`needs`, the inputs that get a gradient) of a node whose `inputs` include None (no gradient):
    two inputs (x * c, c * x) without a pass; `same_needs` keeps one tuple per other pattern."""
    if len(inputs) == 2:
        first, second = inputs
        if second is None:
            return (_FIRST_ONLY, (first,)) if first is not None else (_NEITHER, ())
        return _SECOND_ONLY, (second,)
    needs = tuple(map(_GIVEN, inputs))
    return same_needs(needs, needs), tuple(compress(inputs, needs))


def _type_info(gnode: Any, n_inputs: int) -> tuple[Any, ...]:
    """What does not change per node type (and number of inputs): its name, its op (None for a custom
    Function, named by its class), the formulas by slot, each tensor slot's rule text, its tensor slots,
    (its attribute slots' names, one getter of their values, whether there is one, the pairs made of
    one's values) or None for no
    attributes, its tensor slots again with whether each is a result (fill's loop), those by pattern of
    inputs that get a gradient (_slots_for), and `needs` where every input gets one; for a custom
    Function only its name, formulas and that `needs` (the rest None or empty)."""
    name = gnode.name()
    by_slot = _rules_of(type(gnode), name, n_inputs)
    needs = _ALL_NEEDED[n_inputs] if n_inputs < len(_ALL_NEEDED) else (True,) * n_inputs
    if is_custom_function(gnode):
        return name, None, by_slot, {}, None, None, None, None, needs
    rule_of = {slot: rules.rule_text(slot, by_slot) for slot in slot_names(type(gnode))[0]}
    slots = attribute_slots(type(gnode))
    read = (tuple(slot for slot, _ in slots), attrgetter(*(attr for _, attr in slots)), len(slots) == 1, {}) \
        if slots else None
    tensor_slots = tensor_attributes(type(gnode))
    fill_slots = tuple((*slot, slot[0].startswith("result")) for slot in tensor_slots)  # and whether it is a result
    return name, op_name(gnode), by_slot, rule_of, tensor_slots, read, fill_slots, {}, needs


def _slots_for(gnode: Any, info: tuple[Any, ...], needs: tuple[bool, ...]) -> tuple[Any, ...]:
    """fill()'s slots of a node type for one pattern of inputs that get a gradient: without those PyTorch's
    generated code leaves empty for it (derivatives.saved_for_one_input: a tensor only one input's gradient
    reads is saved only when that input gets one), kept in `info` for the pattern. The rule is checked on
    the first node of each pattern: a slot it calls empty that is not, and the type's slots are all read."""
    name, fill_slots, by_needs = info[0], info[6], info[7]
    try:
        guards = derivatives.saved_for_one_input(name)
    except Exception:  # a yaml this torch ships that cannot be read: a speed-up lost, every slot read
        guards = {}
    empty = {slot for slot, k in guards.items() if k < len(needs) and not needs[k]}
    for slot, raw_attr, value_attr, _ in fill_slots:
        if slot in empty:
            raw = getattr(gnode, raw_attr)
            try:  # (as fill reads a first slot: a hook is never unpacked)
                held = raw is not None and (type(raw) is tuple or type(raw) is list or raw.unpack_hook is not None
                                            or getattr(gnode, value_attr) is not None)
            except RuntimeError:  # released: not this node's to tell
                return fill_slots
            if held:  # not as the rule says: every slot is read
                empty = set()
    by_needs[needs] = kept = tuple(s for s in fill_slots if s[0] not in empty)
    return kept


def _attribute_values(gnode: Any,
                      read: tuple[tuple[str, ...], Any, bool, dict[Any, Any]]) -> tuple[tuple[str, Any], ...]:
    """internals.saved_attribute_values, plain (_plain_values), with one C-level read of every value
    (`read`: _type_info's slot names, their getter, whether there is one, and the pairs made so far
    for the values seen of one int or str: `alpha=1` on node after node is one tuple; the caller
    checked that this torch names saved values: internals.require)."""
    names, get, one, made = read
    if one:
        value = get(gnode)
        kind = type(value)
        if kind is int or kind is str:  # (not bool, float: True == 1, 0.0 == -0.0 as keys)
            pairs = made.get(value)
            if pairs is None:
                pairs = ((names[0], value),)
                if len(made) < _PAIRS_KEPT:  # (an attribute whose value is new at every node keeps no pile)
                    made[value] = pairs
            return pairs
        return ((names[0], value),) if kind in _ATOMS else _plain_values(((names[0], value),))
    return _plain_values(tuple(zip(names, get(gnode))))


@functools.cache
def _rules_of(kind: type, name: str, n_inputs: int) -> dict[str, str] | None:
    """slot -> the formulas that read it, for a node type (None: not in the rule table)."""
    if not rules.described(name):
        return None
    return rules.rules_by_slot(name, n_inputs, frozenset(slot_names(kind)[0]) | {"saved_tensors"})


_DTYPES: dict[torch.dtype, tuple[str, int]] = {}  # dtype -> its text, bytes per element (read once each)


def _new_dtype(dtype: torch.dtype) -> tuple[str, int]:
    """A dtype not seen yet: its text (`float32` for torch.float32: str() of a dtype is slow next to a
    dict lookup) and its bytes per element, kept."""
    found = _DTYPES[dtype] = (str(dtype).removeprefix("torch."), dtype.itemsize)
    return found


def _new_shape(shapes: dict[Any, tuple[tuple[int, ...], int]], size: torch.Size) -> tuple[tuple[int, ...], int]:
    """A shape fill has not seen in this trace: one plain tuple for all its residuals (fewer objects for
    the collector) and its number of elements, kept in `shapes`."""
    found = shapes[size] = (tuple(size), math.prod(size))
    return found


def _dtype_text(dtype: torch.dtype) -> str:
    """`float32` for torch.float32."""
    return (_DTYPES.get(dtype) or _new_dtype(dtype))[0]


def _preview(t: torch.Tensor | None) -> Any:
    """The values of a small tensor, read now (the trace holds no tensor) and made text when read
    (_preview_text)."""
    if t is None or t.numel() > 4 or t.layout != torch.strided or not has_data(t):
        return None
    return _values(t)


def _values(t: torch.Tensor) -> Any:
    """_preview of a strided tensor of at most 4 elements that has data (the caller checked): a number,
    or a list of them for a tensor with dimensions."""
    try:
        values = t.tolist()
    except RuntimeError:  # e.g. a real scalar read while a FakeTensorMode is active
        return None
    if type(values) is list and t.dim() > 1:
        return t.detach().reshape(-1).tolist()
    return values


def _preview_text(values: Any) -> str | None:
    """A preview as text: `0.7311`, `[1, 2, 3]`."""
    if values is None:
        return None
    if type(values) is not list:  # a 0-dim tensor
        return f"{values:.4g}" if isinstance(values, float) else str(values)
    return "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in values) + "]"


def _role_words(roles: tuple[str | int, ...], from_node: tuple[int | None, ...], names: tuple[str, ...]) -> list[str]:
    """The role column in words: a residual that is a node's output was kept as a code (role())."""
    return [role if type(role) is str else
            f"output of #{at} {names[at]} (this node)" if role == _OUTPUT_OF_THIS else f"output of #{at} {names[at]}"
            for role, at in zip(roles, from_node)]
