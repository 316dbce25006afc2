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

from .internals import (
    checkpoint_cache,
    checkpoint_frames_of,
    checkpoint_inputs,
    custom_raw_saved,
    is_custom_function,
    raw_slot,
    saved_attributes,
    slot_names,
    tensor_attributes,
)
from .rows import HeldIn, Status

__all__ = ["CHECKPOINT_RULE", "SavedSlot", "attributes", "checkpoint_cache", "checkpoint_kept", "is_custom_function",
           "raw_slot", "released", "saved_slots", "saved_values", "slot_names"]


@dataclass(slots=True)
class SavedSlot:
    """One saved tensor slot of one node, as the runtime holds it right now."""

    slot: str
    status: Status
    tensor: torch.Tensor | None  # the value (or its host copy); None when gone or recomputed
    place: HeldIn = HeldIn.GRAPH
    error: str | None = None  # PyTorch's message when reading it failed
    hook: str | None = None  # the unpack hook's qualified name, for HeldIn.HOOK


def attributes(node: Any) -> dict[str, Any]:
    """Non-tensor values a node saved (sizes, dims, scalars): shown, never counted as memory."""
    if is_custom_function(node):
        return {k: v for k, v in vars(node).items() if not k.startswith("_")} if hasattr(node, "__dict__") else {}
    return saved_attributes(node)


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


CHECKPOINT_RULE = "read by torch.utils.checkpoint to rerun the region's forward in backward"


def checkpoint_kept(node: Any, seen: list[Any]) -> list[SavedSlot]:
    """The inputs each checkpointed region whose saved values this node holds keeps for recompute
    (`checkpoint args[0]`, ...), for regions not in `seen` yet (which this adds them to): real
    memory that only the graph holds, through checkpoint's unpack hooks."""
    out: list[SavedSlot] = []
    for frame in checkpoint_frames_of(node):
        if any(frame is f for f in seen):
            continue
        seen.append(frame)
        for name, raw in checkpoint_inputs(frame):
            slot = f"checkpoint {name}"
            if isinstance(raw, torch.Tensor):
                out.append(SavedSlot(slot, Status.LIVE, raw, HeldIn.CHECKPOINT))
                continue
            saved = _read_raw(node, slot, raw, raw.unpack)
            if saved.place is HeldIn.GRAPH:
                saved.place = HeldIn.CHECKPOINT
            if saved.status is not Status.NOT_SAVED:
                out.append(saved)
    return out


def released(node: Any, slots: list[str]) -> list[str]:
    """Which of these slots autograd has released, read without unpacking anything (cheap)."""
    if is_custom_function(node):
        try:
            _ = custom_raw_saved(node)  # raises once autograd released them
        except RuntimeError:
            return list(slots)
        return []
    gone = []
    own = [slot for slot in slots if not slot.startswith("checkpoint ")]
    for slot in own:
        try:
            raw = raw_slot(node, slot)
        except (RuntimeError, IndexError):  # a released tensor list refuses to be read at all
            gone.append(slot)
            continue
        if raw is not None and raw.data is None:
            gone.append(slot)
    if own and len(gone) == len(own):  # what a checkpoint keeps goes with the node's own saved values
        gone = [slot for slot in slots if slot in gone or slot.startswith("checkpoint ")]
    return gone


def saved_slots(node: Any) -> list[SavedSlot]:
    """Every tensor the node saved for backward, with the slot name PyTorch uses."""
    if is_custom_function(node):
        try:
            raws = custom_raw_saved(node)
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
    for name, raw_attr, value_attr in tensor_attributes(type(node)):  # self, other, result, ...
        try:
            raw = getattr(node, raw_attr)
        except RuntimeError as err:  # a released list of saved tensors: PyTorch no longer says how many
            out.append(SavedSlot(name, Status.RELEASED, None, error=str(err)))
            continue
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


_LIVE, _GRAPH = Status.LIVE, HeldIn.GRAPH


def saved_values(node: Any, slots: tuple[tuple[str, str, str], ...] | None = None) -> list[tuple[Any, ...]]:
    """saved_slots(node) as plain tuples (slot, status, tensor, place, error, hook): what the build
    reads, without an object per slot for the common case (a plain saved tensor); `slots`: the
    node type's tensor_attributes, when the caller has them (a built-in node's type)."""
    if slots is None:
        if is_custom_function(node):
            return [(s.slot, s.status, s.tensor, s.place, s.error, s.hook) for s in saved_slots(node)]
        slots = tensor_attributes(type(node))
    out: list[tuple[Any, ...]] = []
    for name, raw_attr, value_attr in slots:  # self, other, result, ...
        try:
            raw = getattr(node, raw_attr)
        except RuntimeError as err:  # a released list of saved tensors: PyTorch no longer says how many
            out.append((name, Status.RELEASED, None, _GRAPH, str(err), None))
            continue
        if raw is not None and type(raw) is not tuple and type(raw) is not list and raw.unpack_hook is None:
            try:
                value = getattr(node, value_attr)
            except RuntimeError:  # released or modified in place: _read_raw tells which
                pass
            else:
                if value is not None:
                    out.append((name, _LIVE, value, _GRAPH, None, None))
                continue
        if isinstance(raw, (tuple, list)):
            found = [_read_raw(node, f"{name}[{i}]", item, lambda i=i, a=value_attr: getattr(node, a)[i])
                     for i, item in enumerate(raw)]
        else:
            found = [_read_raw(node, name, raw, lambda a=value_attr: getattr(node, a))]
        out += [(s.slot, s.status, s.tensor, s.place, s.error, s.hook) for s in found
                if s.status is not Status.NOT_SAVED]
    return out
