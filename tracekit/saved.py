"""Reading what a backward node saved, without changing it.

Built-in nodes expose each saved value as `_saved_<slot>` and, for tensors, the raw
`_raw_saved_<slot>` (a SavedTensor whose `.data` is the stored object and whose
`.unpack_hook` tells whether a saved-tensor hook owns it). Custom autograd.Functions
expose `_raw_saved_tensors`. A tensor that a hook packed is never unpacked here: that
could recompute a checkpointed forward or copy an offloaded value back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from .model import HeldIn, Status


@dataclass(slots=True)
class SavedSlot:
    """One saved tensor slot of one node, as the runtime holds it right now."""

    slot: str
    status: Status
    tensor: torch.Tensor | None  # the value (or its host copy); None when gone or recomputed
    place: HeldIn = HeldIn.GRAPH
    error: str | None = None  # PyTorch's message when reading it failed
    hook: str | None = None  # the unpack hook's qualified name, for HeldIn.HOOK


def is_custom_function(node: Any) -> bool:
    """True for the backward node of a user-defined torch.autograd.Function."""
    return _custom_kind(type(node))


@functools.cache
def _custom_kind(kind: type) -> bool:
    return hasattr(kind, "_forward_cls")  # set on the backward class FunctionMeta makes


@functools.cache
def slot_names(kind: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tensor slots, attribute slots) of a built-in node type: the only scan of `_saved_` names."""
    names = [a[len("_saved_"):] for a in dir(kind) if a.startswith("_saved_")]
    names.sort(key=lambda n: (n != "self", n.startswith("result")))  # inputs first, outputs last
    raw = {a[len("_raw_saved_"):] for a in dir(kind) if a.startswith("_raw_saved_")}
    return tuple(n for n in names if n in raw), tuple(n for n in names if n not in raw)


def raw_slot(node: Any, slot: str) -> Any:
    """The SavedTensor behind one slot (`tensors[1]` indexes the list), read without unpacking;
    raises RuntimeError or IndexError when autograd has released a list."""
    name, _, index = slot.partition("[")
    raw = getattr(node, "_raw_saved_" + name, None)
    if index and isinstance(raw, (tuple, list)):
        raw = raw[int(index.rstrip("]"))]
    return raw


def attributes(node: Any) -> dict[str, Any]:
    """Non-tensor values a node saved (sizes, dims, scalars): shown, never counted as memory."""
    if is_custom_function(node):
        return {k: v for k, v in vars(node).items() if not k.startswith("_")} if hasattr(node, "__dict__") else {}
    return {name: getattr(node, "_saved_" + name) for name in slot_names(type(node))[1]}


def _hook_place(hook: Any) -> tuple[HeldIn, str | None]:
    """Where a hooked value is kept, and the hook's name when it is the user's own."""
    module = getattr(hook, "__module__", "") or ""
    qualname = getattr(hook, "__qualname__", repr(hook))
    if module.startswith("torch.utils.checkpoint"):
        return HeldIn.RECOMPUTED, None
    if "save_on_cpu" in qualname:
        return HeldIn.HOST, None
    return HeldIn.HOOK, qualname


def _first_tensor(obj: Any) -> torch.Tensor | None:
    stack = [obj]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return item
        if isinstance(item, (tuple, list)):
            stack.extend(item)
    return None


def _read_raw(node: Any, slot: str, raw: Any, unpack: Any) -> SavedSlot:
    """Read one SavedTensor: unpack plain ones (for grad_fn), never hooked ones."""
    if raw is None:
        return SavedSlot(slot, Status.NOT_SAVED, None)
    hook = raw.unpack_hook
    if hook is not None:
        place, name = _hook_place(hook)
        packed = raw.data
        if packed is None:
            return SavedSlot(slot, Status.RELEASED, None, place, hook=name)
        tensor = None if place is HeldIn.RECOMPUTED else _first_tensor(packed)
        return SavedSlot(slot, Status.LIVE, tensor, place, hook=name)
    data = raw.data
    try:
        value = unpack()  # None for a slot the op did not need to fill; raises once released
    except RuntimeError as err:
        text = str(err)
        if data is not None and "modified by an inplace operation" in text:
            return SavedSlot(slot, Status.MODIFIED, data, error=text)
        return SavedSlot(slot, Status.RELEASED, None, error=text)
    if value is None:
        return SavedSlot(slot, Status.NOT_SAVED, None)
    return SavedSlot(slot, Status.LIVE, value)


def released(node: Any, slots: list[str]) -> list[str]:
    """Which of these slots autograd has released, read without unpacking anything (cheap)."""
    if is_custom_function(node):
        try:
            _ = node._raw_saved_tensors  # raises once autograd released them
        except RuntimeError:
            return list(slots)
        return []
    gone = []
    for slot in slots:
        try:
            raw = raw_slot(node, slot)
        except (RuntimeError, IndexError):  # a released tensor list refuses to be read at all
            gone.append(slot)
            continue
        if raw is not None and raw.data is None:
            gone.append(slot)
    return gone


def saved_slots(node: Any) -> list[SavedSlot]:
    """Every tensor the node saved for backward, with the slot name PyTorch uses."""
    if is_custom_function(node):
        try:
            raws = node._raw_saved_tensors
        except RuntimeError as err:  # released: PyTorch no longer says how many there were
            return [SavedSlot("saved_tensors", Status.RELEASED, None, error=str(err))]
        values, failure = None, None
        if all(raw is None or raw.unpack_hook is None for raw in raws):
            try:
                values = node.saved_tensors  # unpacking checks versions, like backward will
            except RuntimeError as err:
                failure = err

        def unpack(i: int) -> Any:
            if values is None:
                raise failure or RuntimeError("saved tensors unavailable")
            return values[i]

        return [
            _read_raw(node, f"saved_tensors[{i}]", raw, lambda i=i: unpack(i))
            for i, raw in enumerate(raws)
        ]
    out: list[SavedSlot] = []
    for name, raw_attr, value_attr in _tensor_attributes(type(node)):  # self, other, result, ...
        raw = getattr(node, raw_attr)
        if isinstance(raw, (tuple, list)):
            for i, item in enumerate(raw):
                out.append(_read_raw(node, f"{name}[{i}]", item, lambda i=i, a=value_attr: getattr(node, a)[i]))
            continue
        if raw is not None and raw.unpack_hook is None:  # the common case: a plain saved tensor
            try:
                value = getattr(node, value_attr)
            except RuntimeError:  # released or modified in place: _read_raw tells which
                pass
            else:
                if value is not None:
                    out.append(SavedSlot(name, Status.LIVE, value))
                continue
        out.append(_read_raw(node, name, raw, lambda a=value_attr: getattr(node, a)))
    return [s for s in out if s.status is not Status.NOT_SAVED]


@functools.cache
def _tensor_attributes(kind: type) -> tuple[tuple[str, str, str], ...]:
    """(slot, its raw attribute, its value attribute) for each tensor slot of a node type."""
    return tuple((name, "_raw_saved_" + name, "_saved_" + name) for name in slot_names(kind)[0])


def _cell_values(fn: Any) -> dict[str, Any]:
    """A function's closure cells by name (empty cells left out)."""
    out = {}
    for name, cell in zip(getattr(fn, "__code__", None).co_freevars if hasattr(fn, "__code__") else (),
                          getattr(fn, "__closure__", None) or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return out


def _raw_saved(gnode: Any) -> list[Any]:
    """Every SavedTensor a node holds (lists flattened), read without unpacking any."""
    if is_custom_function(gnode):
        raws = list(gnode._raw_saved_tensors)
    else:
        raws = [raw_slot(gnode, name) for name in slot_names(type(gnode))[0]]
    return [item for raw in raws for item in (raw if isinstance(raw, (list, tuple)) else (raw,))]


def checkpoint_cache(graph_nodes: list[Any]) -> list[tuple[str, torch.Tensor]]:
    """(op, tensor) of each op output selective activation checkpointing keeps for these nodes'
    checkpointed regions (found through the checkpoint hooks of their saved tensors; empty without SAC)."""
    frames: list[Any] = []
    for gnode in graph_nodes:
        for raw in _raw_saved(gnode):
            hook = getattr(raw, "unpack_hook", None)
            if hook is None or not (getattr(hook, "__module__", "") or "").startswith("torch.utils.checkpoint"):
                continue
            frame = _cell_values(hook).get("frame")
            if frame is not None and not any(frame is f for f in frames):
                frames.append(frame)
    found: list[tuple[str, torch.Tensor]] = []
    for frame in frames:
        context = _cell_values(getattr(frame, "recompute_fn", None)).get("recompute_context")
        storage = getattr(context, "storage", None)
        if not isinstance(storage, dict):
            continue
        for op, kept in storage.items():
            values = kept.values() if isinstance(kept, dict) else kept
            for wrapped in values:
                for t in torch.utils._pytree.tree_leaves(getattr(wrapped, "val", None)):
                    if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                        found.append((str(op), t))
    return found
