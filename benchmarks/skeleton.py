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
- while backward runs (per step): which node runs, which backward call (graph task) runs it, and which
  storages the graph let go of are gone (weak references); the node before released its saved values
  (its rule returned: the engine releases them before it starts the next rule of the same call),
  read from one raw slot only after the last step (and where a step is another call's).

Every row is one tuple; a step appends to three lists. Made as cheap as we could (a red-team pass cut
its first version by 8 % on the scalars): each edge list read once, leaves told apart by type, one
Python call per backward step (the build's node objects held, so a step finds its node by identity),
torch's frames told apart by file name once per file, C-level loops where a loop only maps, the
build's own garbage freed before the collector resumes. Its cost over the plain forward + backward
is what a Python record of these facts costs before it derives anything: what tracekit adds above
it is its record.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from operator import attrgetter, itemgetter, methodcaller
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tracekit.internals import (
    GRAPH_TASK,
    NEXT_SEQUENCE_NR,
    attribute_slots,
    shared_hook_dict,
    storage_weak_ref,
    tensor_attributes,
    weak_expired,
)
from tracekit.keeper import gc_paused
from tracekit.storage import drop_weak_ref

_TORCH = os.path.dirname(torch.__file__)
_getframe = sys._getframe
_NEXT = NEXT_SEQUENCE_NR
_SEQ = methodcaller("_sequence_nr")
current_node = torch._C._current_autograd_node
graph_task = GRAPH_TASK
third, sixth = itemgetter(2), itemgetter(5)


class _TorchFiles(dict):
    """file name -> whether it is torch's (each name tested once)."""

    def __missing__(self, name: str) -> bool:
        ours = self[name] = name.startswith(_TORCH)
        return ours


_torch_file = _TorchFiles()


class CallMode(TorchFunctionMode):
    """Per torch call that made nodes: its first sequence number -> (the number after its last, the
    caller's code, its offset). Torch's own frames are told by their file name, tested once per file."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, tuple[int, Any, int]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        start = _NEXT()
        result = func(*args, **kwargs) if kwargs else func(*args)
        end = _NEXT()
        if end > start:
            frame = _getframe(1)
            code = frame.f_code
            while _torch_file[code.co_filename]:
                frame = frame.f_back
                code = frame.f_code
            self.calls[start] = (end, code, frame.f_lasti)
        return result


def skeleton_trace(outputs: list[torch.Tensor], calls: dict[int, tuple[int, Any, int]]) -> dict[str, Any]:
    """The build's reads, kept as rows: nodes (name, inputs, first residual, count, attributes, the
    call that made it, the raw slot backward probes), residuals (as bare_reads), storages (address,
    size, whether backward watches it; a weak reference each). The nodes' Python objects are held
    (`position`) until skeleton_backward: the engine hands back the same objects, found by one dict
    lookup per step, instead of a new object per step asked for its sequence number."""
    with gc_paused():
        # the walk: every node once, its edges read once; leaves told apart by type (one hasattr per type)
        seen: set = set()
        add = seen.add
        todo = [t.grad_fn for t in outputs]
        pop, push = todo.pop, todo.append
        edges: dict[Any, tuple] = {}
        leaves: list = []
        leafy: dict[type, bool] = {}
        while todo:
            g = pop()
            if g in seen:
                continue
            add(g)
            kind = type(g)
            leaf = leafy.get(kind)
            if leaf is None:
                leaf = leafy[kind] = hasattr(g, "variable")
            if leaf:
                leaves.append(g)
                continue  # an AccumulateGrad has no next functions
            nexts = edges[g] = g.next_functions
            for n, _ in nexts:
                if n is not None and n not in seen:
                    push(n)
        by_seq = dict(zip(map(_SEQ, edges), edges))
        seqs = sorted(by_seq)
        nodes = [by_seq[s] for s in seqs]
        position = dict(zip(nodes, range(len(nodes))))
        index = dict(zip(seqs, range(len(nodes))))
        # the storages of leaves that get gradients (parameters, inputs), and of the outputs: they outlive backward
        kept = set()
        for t in [g.variable for g in leaves] + list(outputs):
            kept.add(t.untyped_storage().data_ptr() if t.is_cpu else (str(t.device), t.untyped_storage().data_ptr()))
        types: dict[type, tuple] = {}
        storages: dict[Any, int] = {}
        storage_rows: list[tuple] = []
        weaks: list[int] = []
        residuals: list[tuple] = []
        node_rows: list[tuple] = []
        add_residual, add_node = residuals.append, node_rows.append
        add_storage, add_weak = storage_rows.append, weaks.append
        get_position, get_storage, get_call = position.get, storages.get, calls.get
        first_of = itemgetter(0)
        i = 0
        for g in nodes:
            kind = type(g)
            info = types.get(kind)
            if info is None:
                names = tuple(a for _, a in attribute_slots(kind))  # one value bare, several as a tuple
                info = types[kind] = (g.name(), tensor_attributes(kind),
                                      attrgetter(*names) if names else None, names)
            first = len(residuals)
            probe = None  # the raw slot that tells, after the last step, whether the node released its values
            for slot, raw_attr, value_attr in info[1]:
                t = getattr(g, value_attr)
                if t is None:  # a slot the op left empty
                    continue
                if probe is None:
                    probe = raw_attr
                s = t.untyped_storage()
                ptr = s.data_ptr()
                key = ptr if t.is_cpu else (str(t.device), ptr)
                k = get_storage(key)
                producer = t.grad_fn
                if k is None:
                    k = storages[key] = len(storage_rows)
                    add_storage((key, s.nbytes(), (producer is not None or not t.requires_grad) and key not in kept))
                    add_weak(storage_weak_ref(s))
                numel = t.numel()
                dtype = t.dtype
                add_residual((i, slot, t.shape, dtype, numel * dtype.itemsize, k,
                              None if producer is None else get_position(producer), t._version,
                              t.tolist() if numel <= 4 else None))
            n = len(residuals) - first
            attrs = info[2]
            add_node((info[0], tuple(map(get_position, map(first_of, edges[g]))), first, n,
                      attrs(g) if attrs is not None else None, get_call(seqs[i]), probe))
            i += 1
        edges = seen = by_seq = None  # young garbage: gone before the collector runs again
        hooks = shared_hook_dict(nodes)  # registered on every node, as the build registers it
        return {"nodes": node_rows, "residuals": residuals, "storages": storage_rows, "weaks": weaks,
                "index": index, "hooks": hooks, "types": types,
                "position": position}  # the graph's nodes, held until backward (its steps find them here)


def skeleton_backward(loss: torch.Tensor, trace: dict[str, Any]) -> tuple[list[int], list, list]:
    """Backward with one step per node: (the order the nodes ran in, (step, node) for each release
    seen, (step, storage) for each storage seen gone)."""
    nodes, residuals, weaks = trace["nodes"], trace["residuals"], trace["weaks"]
    hooks, position = trace["hooks"], trace.pop("position")  # node -> its row; dropped once backward ends
    watched = list(map(third, trace["storages"]))
    stored = list(map(sixth, residuals))  # each residual's storage
    held = [0] * len(weaks)  # how many saved tensors of the graph hold each storage
    for s in stored:
        held[s] += 1
    order: list[int] = []
    released: list[tuple[int, int]] = []
    freed: list[tuple[int, int]] = []
    pending: list[int] = []
    add_order, add_released, add_freed, add_pending = order.append, released.append, freed.append, pending.append
    prev: Any = None  # the node that ran last, when it saved something
    prev_row: Any = None
    prev_i = 0
    prev_task = observed = -2  # the backward call (graph task) of that step; of the first step
    k = -1  # its step

    def hook(_grad: Any, end: bool = False) -> None:
        """Step k ended (its node released its values: read after the last step, or where a step is
        another backward call's; storages seen gone); the next begins."""
        nonlocal prev, prev_row, prev_i, prev_task, observed, k, pending, add_pending
        task = -3 if end else graph_task()
        if pending:
            still = []
            for s in pending:
                if weak_expired(weaks[s]):
                    add_freed((k, s))
                else:
                    still.append(s)
            pending = still
            add_pending = still.append
        if prev_row is not None:
            raw = None if task == prev_task == observed else getattr(prev, prev_row[6])
            if raw is None or raw.data is None:
                add_released((k, prev_i))
                first = prev_row[2]
                for s in stored[first:first + prev_row[3]]:
                    held[s] -= 1
                    if not held[s] and watched[s]:  # the graph let go of it: gone now, or soon
                        if weak_expired(weaks[s]):
                            add_freed((k, s))
                        else:
                            add_pending(s)
        if end:  # after backward: the last step settled
            return
        g = current_node()
        i = position[g]
        row = nodes[i]
        if row[3]:
            prev, prev_row, prev_i, prev_task = g, row, i, task
        else:
            prev = prev_row = None
        if k < 0:
            observed = task
        k += 1
        add_order(i)

    with gc_paused():
        for d in hooks:  # the hook dicts the nodes have (one per node, as the build leaves them)
            d[0] = hook
        loss.backward()
        for d in hooks:
            d.clear()
        if k >= 0:
            hook(None, True)
        prev = position = None
    deque(map(drop_weak_ref, weaks), 0)
    return order, released, freed
