"""Who holds each storage at a mark of the budget's step, by category: read in full at a phase
mark (the step's start and end, each backward call, zero_grad, the optimizer step), and at a
reverse rule's mark updated by what a rule can change (a parameter's gradient, the saved values
autograd released), so that a step with a mark per rule costs its changes, not its storages
times its rules."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..internals import StorageRef, storage_identity
from ..saved import released
from ..storage import allocated_bytes
from .ledger import Holder

# the holder groups, first match wins: what the parameters hold (and buffers), their gradients, the
# optimizer's state, what the caller's code holds, what the running backward's graph saved, what graphs
# kept by retain_graph saved
PARAMETERS, GRADIENTS, OPTIMIZER, APPLICATION, SAVED, RETAINED = range(6)
_CATEGORY = ("parameters", "gradients", "optimizer state", "application references", "saved activations",
             "saved activations")


def storage_key(storage: Any) -> int:
    """An allocation's identity: its address, or on the meta device (every address 0) its StorageImpl."""
    return storage_identity(storage) if storage.device.type == "meta" else storage.data_ptr()


@dataclass(eq=False)
class SavedValue:
    """A tensor the running backward's graph saved on the device: where, which storage, its bytes."""

    node: Any
    slot: str
    key: int  # the storage's identity (see storage_key)
    nbytes: int
    storage: StorageRef  # to notice when a graph kept by retain_graph lets it go


class Holders:
    """Each group's storages (key -> (category, bytes)) at the last mark; the holders at a mark are
    the groups merged, a storage counting for the first group that holds it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.groups: list[dict[int, Holder]] = [{} for _ in _CATEGORY]
        # per parameter: its .grad at the last mark (a weak reference: holding it would change what is
        # measured), that gradient's key and bytes
        self.grads: list[tuple[weakref.ref, int, int] | None] = []
        self.counts: dict[int, dict[int, int]] = {GRADIENTS: {}, SAVED: {}}  # key -> how many hold it
        self.start_weak: dict[int, StorageRef] = {}  # storages seen at the start, to notice their end

    def _read(self, t: torch.Tensor | None) -> tuple[int, int, Any] | None:
        """(key, allocated bytes, storage) of a tensor on the device with memory; None otherwise."""
        if t is None or t.layout != torch.strided or t.device != self.device:
            return None
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        return (storage_key(storage), allocated_bytes(nbytes, str(self.device)), storage) if nbytes else None

    def _fill(self, group: int, tensors: Iterable[torch.Tensor | None], first: bool) -> None:
        out = self.groups[group] = {}
        counts = self.counts.get(group)
        if counts is not None:
            counts.clear()
        for t in tensors:
            read = self._read(t)
            if read is None:
                continue
            key, nbytes, storage = read
            out.setdefault(key, (_CATEGORY[group], nbytes))
            if counts is not None:
                counts[key] = counts.get(key, 0) + 1
            if first and key not in self.start_weak:
                self.start_weak[key] = StorageRef(storage)

    def read_all(self, params: list[torch.Tensor], buffers: list[torch.Tensor], state: Iterable[torch.Tensor],
                 application: Iterable[torch.Tensor], saved: list[SavedValue],
                 retained: dict[int, tuple[StorageRef, int]], first: bool) -> dict[int, Holder]:
        """Every holder now (a phase mark); `first`: the step's start, whose storages are watched."""
        self._fill(PARAMETERS, params + buffers, first)
        grads = [p.grad for p in params]
        self._fill(GRADIENTS, grads, first)
        self.grads = [self._grad(g) for g in grads]
        del grads
        self._fill(OPTIMIZER, state, first)
        self._fill(APPLICATION, application, first)
        counts = self.counts[SAVED]
        counts.clear()
        for v in saved:
            counts[v.key] = counts.get(v.key, 0) + 1
        self.groups[SAVED] = {v.key: ("saved activations", v.nbytes) for v in saved}
        self.groups[RETAINED] = {k: ("saved activations", nbytes) for k, (_, nbytes) in retained.items()}
        merged: dict[int, Holder] = {}
        for group in reversed(self.groups):
            merged.update(group)
        return merged

    def after_rule(self, params: list[torch.Tensor], application: Iterable[torch.Tensor], ran: list[SavedValue],
                   retain: bool, retained: dict[int, tuple[StorageRef, int]],
                   saved: dict[int, SavedValue]) -> tuple[dict[int, Holder | None], list[SavedValue]]:
        """What changed since the last mark, while backward runs: the parameters' gradients (a new
        .grad), what the caller's code holds (`application`: a hook may keep a gradient), and the
        saved values of the rules that ran (`ran`), those autograd released now
        (taken out of `saved`; of a graph kept by retain_graph, `retained`: when their storage is
        gone). Returns the holders of the storages that changed (None: held by none now) and the
        values of `ran` to look at again (autograd releases a rule's values as it finishes, unless
        the backward keeps its graph: `retain`)."""
        changed: set[int] = set()
        self._regrad(params, changed)
        before = self.groups[APPLICATION]
        self._fill(APPLICATION, application, False)
        after = self.groups[APPLICATION]
        if after != before:
            changed.update(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        still: list[SavedValue] = []
        counts, group = self.counts[SAVED], self.groups[SAVED]
        for v in ran:
            if released(v.node, [v.slot]):
                del saved[id(v)]
                counts[v.key] -= 1
                if not counts[v.key]:
                    del counts[v.key], group[v.key]
                    changed.add(v.key)
                    held = retained.get(v.key)
                    if held is not None and held[0].expired():
                        del retained[v.key], self.groups[RETAINED][v.key]
            elif not retain:
                still.append(v)  # it ran: autograd releases it at once (checked again at the next mark)
        return {key: self.holder(key) for key in changed}, still

    def _grad(self, g: torch.Tensor | None) -> tuple[weakref.ref, int, int] | None:
        read = self._read(g)
        return None if read is None else (weakref.ref(g), read[0], read[1])

    def _regrad(self, params: list[torch.Tensor], changed: set[int]) -> None:
        counts, group, grads = self.counts[GRADIENTS], self.groups[GRADIENTS], self.grads
        for i, p in enumerate(params):
            g, old = p.grad, grads[i]
            if g is None if old is None else (g is not None and old[0]() is g):  # (a gradient gone: None is not it)
                continue
            grads[i] = new = self._grad(g)
            if old is not None:
                counts[old[1]] -= 1
                if not counts[old[1]]:
                    del counts[old[1]], group[old[1]]
                    changed.add(old[1])
            if new is not None:
                counts[new[1]] = counts.get(new[1], 0) + 1
                group.setdefault(new[1], ("gradients", new[2]))
                changed.add(new[1])

    def holder(self, key: int) -> Holder | None:
        """Who holds this storage now (the first group that does), None if none."""
        for group in self.groups:
            held = group.get(key)
            if held is not None:
                return held
        return None

    def gone(self, keys: Iterable[int] | None = None) -> list[int]:
        """The storages seen at the start that are gone now (among `keys`: the storages whose holders
        changed at a rule's mark), no longer watched."""
        watched = self.start_weak
        candidates = list(watched) if keys is None else [k for k in keys if k in watched]
        out = [k for k in candidates if watched[k].expired()]
        for k in out:
            del watched[k]
        return out
