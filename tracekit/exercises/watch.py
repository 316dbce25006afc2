"""Measured memory for the probes: every storage a region creates, watched through weak
references, so "what is still alive after the call" and "the most that was alive at once"
are facts of the runtime, not counts of what a graph happens to own; and a count of the ops
that ran (to measure recomputation)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from ..internals import StorageRef, TorchDispatchMode, flatten


class Watch(TorchDispatchMode):
    """Inside `with Watch() as w:` every op's output storages are recorded (weakly); `w.peak` is
    the most bytes of those alive at once (checked after each op), `w.ops` counts ops by name."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, tuple[StorageRef, int]] = {}
        self.before: dict[int, StorageRef] = {}  # storages an op read that the region did not create
        self.peak = 0
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        for t in flatten((args, kwargs)):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                ref = StorageRef(t.untyped_storage())
                if ref.cdata not in self.storages and ref.cdata not in self.before:
                    self.before[ref.cdata] = ref
        out = func(*args, **(kwargs or {}))
        self.ops[str(func.overloadpacket.__name__)] += 1
        for t in flatten(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                ref = StorageRef(storage)
                old = self.before.get(ref.cdata)
                if old is not None and not old.expired():
                    continue  # a view of something that existed before the region
                self.before.pop(ref.cdata, None)
                self.storages.setdefault(ref.cdata, (ref, storage.nbytes()))
        self.peak = max(self.peak, self.alive_bytes())
        return out

    def alive_bytes(self, exclude: tuple[torch.Tensor, ...] = ()) -> int:
        """Bytes of the storages created under the watch that are still alive, except `exclude`'s."""
        skip = {StorageRef(t.untyped_storage()).cdata for t in exclude if isinstance(t, torch.Tensor)}
        for key in [k for k, (ref, _) in self.storages.items() if ref.expired()]:
            del self.storages[key]
        return sum(n for k, (_, n) in self.storages.items() if k not in skip)
