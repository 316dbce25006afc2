"""Reading what a backward node saved, without changing it.

Built-in nodes expose each saved value as `_saved_<slot>` and, for tensors, the raw
`_raw_saved_<slot>` (a SavedTensor whose `.data` is the stored object and whose
`.unpack_hook` tells whether a saved-tensor hook owns it). Custom autograd.Functions
expose `_raw_saved_tensors`. A tensor that a hook packed is never unpacked here: that
could recompute a checkpointed forward or copy an offloaded value back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

LIVE, RELEASED, MODIFIED, NOT_SAVED = "live", "released", "modified in place", "not saved"
IN_GRAPH = "graph"
ON_HOST = "host (save_on_cpu)"
RECOMPUTED = "recomputed in backward (checkpoint)"

_SLOTS_BY_TYPE: dict[type, tuple[list[str], list[str]]] = {}


@dataclass
class SavedSlot:
    """One saved tensor slot of one node, as the runtime holds it right now."""

    slot: str
    status: str
    tensor: torch.Tensor | None  # the value (or its host copy); None when gone or recomputed
    held_in: str = IN_GRAPH
    error: str | None = None  # PyTorch's message when reading it failed


def is_custom_function(node: Any) -> bool:
    """True for the backward node of a user-defined torch.autograd.Function."""
    return hasattr(node, "_forward_cls")


def _slot_names(node: Any) -> tuple[list[str], list[str]]:
    """(tensor slots, attribute slots) of a built-in node type, cached per type."""
    kind = type(node)
    if kind not in _SLOTS_BY_TYPE:
        names = [a[len("_saved_"):] for a in dir(kind) if a.startswith("_saved_")]
        names.sort(key=lambda n: (n != "self", n.startswith("result")))  # inputs first, outputs last
        raw = {a[len("_raw_saved_"):] for a in dir(kind) if a.startswith("_raw_saved_")}
        _SLOTS_BY_TYPE[kind] = ([n for n in names if n in raw], [n for n in names if n not in raw])
    return _SLOTS_BY_TYPE[kind]


def attributes(node: Any) -> dict[str, Any]:
    """Non-tensor values a node saved (sizes, dims, scalars): shown, never counted as memory."""
    if is_custom_function(node):
        return {k: v for k, v in vars(node).items() if not k.startswith("_")} if hasattr(node, "__dict__") else {}
    return {name: getattr(node, "_saved_" + name) for name in _slot_names(node)[1]}


def _hook_kind(hook: Any) -> str:
    module = getattr(hook, "__module__", "") or ""
    qualname = getattr(hook, "__qualname__", repr(hook))
    if module.startswith("torch.utils.checkpoint"):
        return RECOMPUTED
    if "save_on_cpu" in qualname:
        return ON_HOST
    return f"custom saved-tensor hook {qualname}"


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
        return SavedSlot(slot, NOT_SAVED, None)
    hook = raw.unpack_hook
    if hook is not None:
        kind = _hook_kind(hook)
        packed = raw.data
        if packed is None:
            return SavedSlot(slot, RELEASED, None, kind)
        tensor = None if kind == RECOMPUTED else _first_tensor(packed)
        return SavedSlot(slot, LIVE, tensor, kind)
    data = raw.data
    try:
        value = unpack()  # None for a slot the op did not need to fill; raises once released
    except RuntimeError as err:
        text = str(err)
        if data is not None and "modified by an inplace operation" in text:
            return SavedSlot(slot, MODIFIED, data, error=text)
        return SavedSlot(slot, RELEASED, None, error=text)
    if value is None:
        return SavedSlot(slot, NOT_SAVED, None)
    return SavedSlot(slot, LIVE, value)


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
        name, _, index = slot.partition("[")
        try:
            raw = getattr(node, "_raw_saved_" + name, None)
            if index and isinstance(raw, (tuple, list)):
                raw = raw[int(index.rstrip("]"))]
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
            return [SavedSlot("saved_tensors", RELEASED, None, error=str(err))]
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
    for name in _slot_names(node)[0]:  # self, other, result, ... (PyTorch's own names)
        raw = getattr(node, "_raw_saved_" + name)
        if isinstance(raw, (tuple, list)):
            for i, item in enumerate(raw):
                out.append(_read_raw(node, f"{name}[{i}]", item, lambda i=i, n=name: getattr(node, "_saved_" + n)[i]))
        else:
            out.append(_read_raw(node, name, raw, lambda n=name: getattr(node, "_saved_" + n)))
    return [s for s in out if s.status != NOT_SAVED]
