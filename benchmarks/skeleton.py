"""The skeleton under the capture rows: every fact a captured, observed trace reads, read while it
exists, and kept as one plain tuple per row with nothing derived. It is not tracekit: no role,
rule, label, module, in-place call, preview text or lifetime object is made, and no check that
keeps tracekit right on graphs this program never builds (hooks, lists of saved tensors, released
or modified slots, checkpoints) runs. What a trace must read, and when:

- while the forward runs (the mode, per torch call): the sequence numbers the call took and the
  caller's place (code and offset; torch's own frames skipped), which give each node its line;
- after it, while the graph holds them (the build, per node): its type's name, inputs, sequence
  number and saved attributes; per saved tensor what the floor's `bare_reads` reads (storage
  address, size and weak reference, shape, dtype, bytes, version, producer, up to 4 values);
- while backward runs (per step): which node runs, whether the node before released its saved
  values (one raw slot read), and which storages the graph let go of are gone (weak references).

Every row is one tuple; a step appends to three lists. Its cost over the plain forward + backward
is the least any Python record of these facts can add: what tracekit adds above it is its record.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tracekit.internals import (
    NEXT_SEQUENCE_NR,
    SEQUENCE_NR,
    PreHook,
    attribute_slots,
    shared_hook_dict,
    storage_weak_ref,
    tensor_attributes,
    weak_expired,
)
from tracekit.internals import version as tensor_version
from tracekit.keeper import gc_paused
from tracekit.live import forward_order, walk
from tracekit.storage import drop_weak_ref

_TORCH = os.path.dirname(torch.__file__)


class CallMode(TorchFunctionMode):
    """Per torch call that made nodes: its first sequence number -> (the number after its last, the
    caller's code, its offset)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, tuple[int, Any, int]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        start = NEXT_SEQUENCE_NR()
        result = func(*args, **kwargs) if kwargs else func(*args)
        end = NEXT_SEQUENCE_NR()
        if end > start:
            frame = sys._getframe(1)
            while frame.f_code.co_filename.startswith(_TORCH):
                frame = frame.f_back
            self.calls[start] = (end, frame.f_code, frame.f_lasti)
        return result


def _key(t: torch.Tensor) -> tuple[str, int]:
    return ("cpu" if t.is_cpu else str(t.device), t.untyped_storage().data_ptr())


def skeleton_trace(outputs: list[torch.Tensor], calls: dict[int, tuple[int, Any, int]]) -> dict[str, Any]:
    """The build's reads, kept as rows: nodes (name, inputs, first residual, count, attributes, the
    call that made it), residuals (as bare_reads), storages (address, size, whether backward watches
    it; a weak reference each)."""
    with gc_paused():
        everything = walk([t.grad_fn for t in outputs])
        nodes = forward_order(everything)
        # the storages of leaves that get gradients (parameters, inputs): they outlive backward
        kept = {_key(n.variable) for n in everything if hasattr(n, "variable")}
        position = {g: i for i, g in enumerate(nodes)}
        types: dict[type, tuple[str, Any, Any]] = {}
        storages: dict[tuple, int] = {}
        storage_rows: list[tuple] = []
        weaks: list[int] = []
        residuals: list[tuple] = []
        node_rows: list[tuple] = []
        seqs = list(map(SEQUENCE_NR, nodes))
        kept.update(_key(t) for t in outputs)  # and the outputs' storages
        for i, g in enumerate(nodes):
            kind = type(g)
            info = types.get(kind)
            if info is None:
                info = types[kind] = (g.name(), tensor_attributes(kind), attribute_slots(kind))
            first = len(residuals)
            for slot, raw_attr, value_attr in info[1]:
                if getattr(g, raw_attr) is None:
                    continue
                t = getattr(g, value_attr)
                if t is None:  # a slot the op left empty
                    continue
                s, producer = t.untyped_storage(), t.grad_fn
                key = ("cpu" if t.is_cpu else str(t.device), s.data_ptr())
                k = storages.get(key)
                if k is None:
                    k = storages[key] = len(storage_rows)
                    # watched in backward: not a leaf's that gets a gradient, nor an output's (they outlive it)
                    watched = (producer is not None or not t.requires_grad) and key not in kept
                    storage_rows.append((key, s.nbytes(), watched))
                    weaks.append(storage_weak_ref(s))
                numel = t.numel()
                residuals.append((i, slot, tuple(t.shape), t.dtype, numel * t.element_size(), k,
                                  position.get(producer) if producer is not None else None, tensor_version(t),
                                  t.tolist() if numel <= 4 else None))
            node_rows.append((info[0], tuple([position.get(n) for n, _ in g.next_functions]), first,
                              len(residuals) - first, tuple([getattr(g, a) for _, a in info[2]]), calls.get(seqs[i])))
        return {"nodes": node_rows, "residuals": residuals, "storages": storage_rows, "weaks": weaks,
                "index": dict(zip(seqs, range(len(nodes)))), "hooks": shared_hook_dict(nodes)}


def skeleton_backward(loss: torch.Tensor, trace: dict[str, Any]) -> tuple[list[int], list, list]:
    """Backward with one step per node: (the order the nodes ran in, (step, node) for each release
    seen, (step, storage) for each storage seen gone)."""
    nodes, residuals, weaks, index = trace["nodes"], trace["residuals"], trace["weaks"], trace["index"]
    watched = [row[2] for row in trace["storages"]]
    held = [0] * len(weaks)
    for r in residuals:
        held[r[5]] += 1
    order: list[int] = []
    released: list[tuple[int, int]] = []
    freed: list[tuple[int, int]] = []
    pending: list[int] = []
    last: list[Any] = [None]

    def settle(k: int) -> None:
        nonlocal pending
        if pending:
            still = []
            for s in pending:
                if weak_expired(weaks[s]):
                    freed.append((k, s))
                else:
                    still.append(s)
            pending = still
        i = order[k]
        row = nodes[i]
        if not row[3]:
            return
        raw = getattr(last[0], "_raw_saved_" + residuals[row[2]][1])
        if raw is not None and raw.data is not None:
            return
        released.append((k, i))
        for j in range(row[2], row[2] + row[3]):
            s = residuals[j][5]
            held[s] -= 1
            if not held[s] and watched[s]:  # the graph let go of it: gone now, or soon
                if weak_expired(weaks[s]):
                    freed.append((k, s))
                else:
                    pending.append(s)

    def before(g: Any) -> None:
        if order:
            settle(len(order) - 1)
        last[0] = g
        order.append(index[SEQUENCE_NR(g)])

    with gc_paused():
        hook = PreHook(None, before, trace["hooks"])
        loss.backward()
        hook.remove()
        if order:
            settle(len(order) - 1)
        last[0] = None
    for ref in weaks:
        drop_weak_ref(ref)
    return order, released, freed
