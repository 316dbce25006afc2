"""The one door to PyTorch's private internals. Every private attribute tracekit reads (outside
exercises/ and grading/) is read here, each behind a capability probed once at import: the
public fallback where one exists, else a MissingCapabilityError that names what this torch lacks.

Capabilities (`CAPABILITIES` says which this torch has):
- `saved_slots`: a node's saved values as `_saved_<slot>` / `_raw_saved_<slot>` (SavedTensor);
  custom Functions' `_raw_saved_tensors` and `_forward_cls`. No public fallback.
- `sequence_nr`: a node's `_sequence_nr()` (forward order). No public fallback.
- `sequence_counter`: `torch._C._autograd._get_sequence_nr()`, the number the next node made on this
  thread will get (capture learns which nodes a call made without reading its outputs' grad_fn);
  degrades to reading the outputs' nodes.
- `current_node`: `torch._C._current_autograd_node()` and the shared hook dict
  (`_register_hook_dict`, `_backward_hooks`): one Python hook for a whole backward. Fallback:
  one public `register_prehook` per node.
- `storage_weak_ref`: bare weak references to storages (`_weak_ref`, `_expired`, `_free_weak_ref`).
  No public fallback.
- `storage_identity`: a storage's `_cdata` (the identity of meta / fake storages, which have no
  address). No public fallback.
- `version_counter`: a tensor's `_version`. No public fallback.
- `fake_tensor`: `torch._subclasses.fake_tensor.FakeTensor` (read lazily: never imported here).
- `checkpoint_cache`: selective checkpointing's cache, reached through the closure cells of
  checkpoint's unpack hooks (`frame`, `recompute_fn`, `recompute_context`); degrades to "no cache".
- `module_frames`: the code of `nn.Module._call_impl`, the frame every module call runs in (capture
  reads the module from it: no global module hook); degrades to "no module labels".
- `checkpoint_inputs`: the inputs a non-reentrant checkpoint keeps for recompute (`saved_args` of
  the `frame` cell of its unpack hooks, SavedTensors); degrades to "none found".
- `dispatch_mode`: `torch.utils._python_dispatch.TorchDispatchMode` (memory_budget's recorder, the
  exercises' watch) and `torch.utils._pytree.tree_flatten` (`flatten`).
- `storage_ref`: `torch.multiprocessing.reductions.StorageWeakRef` (`StorageRef`), a weak reference
  to a storage as a Python object (memory_budget's recorder, the exercises' watch).
- `engine_frame`: the autograd engine's Python frame (`_engine_run_backward`) and its local
  `t_outputs`, read from a failed backward's traceback (tk.explain after the fact); degrades to
  "not found".
- `profiler_events`: `torch._C._profiler._EventType` (memory.py's CPU allocation stream).
- `saved_hooks`: `torch._C._autograd._top_saved_tensors_default_hooks` (the hooks a value saved now
  is packed with), and `_push_saved_tensors_default_hooks` and `SavedTensor.register_hooks`, counted
  (`count_saved_hooks`) by wrappers installed when capture.py is imported: where no hook was ever
  pushed or set, no saved value carries one, so the build need not read each saving node's raw slot
  to find out; degrades to reading it.
"""

from __future__ import annotations

import functools
import operator
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .errors import MissingCapabilityError


def _probe_saved_slots() -> bool:
    node = _node()
    kind = type(node)
    return hasattr(kind, "_saved_result") and hasattr(kind, "_raw_saved_result") and \
        hasattr(node._raw_saved_result, "unpack_hook") and hasattr(node._raw_saved_result, "data")


def _probe(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:  # a probe that fails means the capability is missing, whatever the reason
        return False


def _node() -> Any:
    return torch.ones(1, requires_grad=True).exp().grad_fn


def _probe_sequence() -> tuple[bool, bool]:
    """(`sequence_nr`, `sequence_counter`) from one probe node: whether nodes have `_sequence_nr()`,
    and whether `_get_sequence_nr()` is the number the next node made on this thread gets (one
    node, as before the counter was probed: a lesson prints sequence numbers, which count it)."""
    try:
        counter = torch._C._autograd._get_sequence_nr
        before = counter()
    except Exception:  # a probe that fails means the capability is missing, whatever the reason
        counter = before = None
    try:
        seq = _node()._sequence_nr()
    except Exception:
        return False, False
    if not isinstance(seq, int):
        return False, False
    return True, counter is not None and seq == before and _probe(lambda: counter() == before + 1)


_SEQUENCE_NR, _SEQUENCE_COUNTER = _probe_sequence()


ENGINE_FRAME = "_engine_run_backward"  # torch.autograd.graph's function that calls the C++ engine

CAPABILITIES: dict[str, bool] = {
    "saved_slots": _probe(_probe_saved_slots),
    "sequence_nr": _SEQUENCE_NR,
    "sequence_counter": _SEQUENCE_COUNTER,
    "current_node": _probe(lambda: callable(torch._C._current_autograd_node)
                           and hasattr(_node(), "_register_hook_dict")),
    "storage_weak_ref": _probe(lambda: all(hasattr(torch.UntypedStorage, a)
                                           for a in ("_weak_ref", "_expired", "_free_weak_ref"))),
    "storage_identity": _probe(lambda: isinstance(torch.empty(0).untyped_storage()._cdata, int)),
    "version_counter": _probe(lambda: isinstance(torch.empty(0)._version, int)),
    "module_frames": _probe(lambda: torch.nn.Module._call_impl.__code__.co_varnames[0] == "self"),
    "dispatch_mode": _probe(lambda: __import__("torch.utils._python_dispatch").utils._python_dispatch
                            .TorchDispatchMode is not None),
    "profiler_events": _probe(lambda: __import__("torch._C._profiler", fromlist=["_EventType"])._EventType
                              is not None),
    "storage_ref": _probe(lambda: __import__("torch.multiprocessing.reductions", fromlist=["StorageWeakRef"])
                          .StorageWeakRef is not None),
    "engine_frame": _probe(lambda: callable(getattr(__import__("torch.autograd.graph", fromlist=["graph"]),
                                                    ENGINE_FRAME))),
    "graph_task": _probe(lambda: isinstance(torch._C._current_graph_task_id(), int)),
    "saved_hooks": _probe(lambda: torch._C._autograd._top_saved_tensors_default_hooks(True) is None
                          and callable(torch._C._autograd.SavedTensor.register_hooks)
                          and callable(torch._C._autograd._push_saved_tensors_default_hooks)),
}


def missing(capability: str, what: str) -> Exception:
    """The error for a capability this torch lacks (raise it)."""
    return MissingCapabilityError(
        f"this PyTorch ({torch.__version__}) lacks `{capability}` ({what}), which tracekit needs here: "
        f"use a torch that .ci/run tests (see pyproject.toml's torch range).")


def require(capability: str, what: str) -> None:
    """Raise MissingCapabilityError unless this torch has the capability."""
    if not CAPABILITIES[capability]:
        raise missing(capability, what)


# saved slots -----------------------------------------------------------------------------------

def is_custom_function(node: Any) -> bool:
    """True for the backward node of a user-defined torch.autograd.Function."""
    return _custom_kind(type(node))


@functools.cache
def _custom_kind(kind: type) -> bool:
    return hasattr(kind, "_forward_cls")  # set on the backward class FunctionMeta makes


def custom_forward_name(node: Any) -> str:
    """The name of a custom Function's class (its backward node's forward)."""
    return node._forward_cls.__name__


@functools.cache
def slot_names(kind: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tensor slots, attribute slots) of a built-in node type: the only scan of `_saved_` names."""
    require("saved_slots", "reading what an autograd node saved")
    names = [a[len("_saved_"):] for a in dir(kind) if a.startswith("_saved_")]
    names.sort(key=lambda n: (n != "self", n.startswith("result")))  # inputs first, outputs last
    raw = {a[len("_raw_saved_"):] for a in dir(kind) if a.startswith("_raw_saved_")}
    return tuple(n for n in names if n in raw), tuple(n for n in names if n not in raw)


@functools.cache
def tensor_attributes(kind: type) -> tuple[tuple[str, str, str], ...]:
    """(slot, its raw attribute, its value attribute) for each tensor slot of a node type."""
    return tuple((name, "_raw_saved_" + name, "_saved_" + name) for name in slot_names(kind)[0])


def saved_attribute(node: Any, name: str) -> Any:
    """A non-tensor value a node saved (`_saved_<name>`)."""
    return getattr(node, "_saved_" + name)


@functools.cache
def attribute_slots(kind: type) -> tuple[tuple[str, str], ...]:
    """(slot, its attribute) for each non-tensor value a built-in node type saves."""
    return tuple((name, "_saved_" + name) for name in slot_names(kind)[1])


def saved_attributes(node: Any, slots: tuple[tuple[str, str], ...] | None = None) -> dict[str, Any]:
    """Every non-tensor value a built-in node saved, by slot name (sizes, dims, scalars); `slots`:
    its type's attribute_slots, when the caller has them."""
    return dict(saved_attribute_values(node, slots or attribute_slots(type(node)))) if slots != () else {}


def saved_attribute_values(node: Any, slots: tuple[tuple[str, str], ...]) -> tuple[tuple[str, Any], ...]:
    """saved_attributes as (slot, value) pairs, for a built-in node type's attribute_slots."""
    if not CAPABILITIES["saved_slots"]:
        raise missing("saved_slots", "reading what an autograd node saved")
    return tuple([(name, getattr(node, attr)) for name, attr in slots])


def raw_slot(node: Any, slot: str) -> Any:
    """The SavedTensor behind one slot (`tensors[1]` indexes the list), read without unpacking;
    raises RuntimeError or IndexError when autograd has released a list."""
    name, _, index = slot.partition("[")
    raw = getattr(node, "_raw_saved_" + name, None)
    if index and isinstance(raw, (tuple, list)):
        raw = raw[int(index.rstrip("]"))]
    return raw


def custom_raw_saved(node: Any) -> Any:
    """A custom Function's SavedTensors (raises RuntimeError once autograd released them)."""
    return node._raw_saved_tensors


def is_released(node: Any, slot: str) -> bool:
    """Whether autograd released a node's saved values, read from one raw slot without unpacking it
    (None data, or PyTorch refusing, means released; one slot stands for all: a node releases every
    saved value at once, right after its rule ran)."""
    probe = _PROBES.get((type(node), slot))
    if probe is None:
        probe = _PROBES[(type(node), slot)] = _release_probe(node, slot)
    attr, index = probe
    try:
        raw = getattr(node, attr)
        if index is not None:
            if index < 0:
                return False  # a custom Function's saved tensors raise once released
            raw = raw[index]
        return raw is not None and raw.data is None
    except (RuntimeError, IndexError):  # "saved tensors ... have already been freed"
        return True


def _release_probe(node: Any, slot: str) -> tuple[str, int | None]:
    """The raw attribute (and list index; -1: a custom Function's) that tells whether `slot` is gone."""
    if is_custom_function(node):
        return "_raw_saved_tensors", -1
    name, _, index = slot.partition("[")
    return "_raw_saved_" + name, int(index.rstrip("]")) if index else None


_PROBES: dict[tuple[type, str], tuple[str, int | None]] = {}  # (node type, slot) -> its release probe


# saved-tensor hooks ------------------------------------------------------------------------------

# default_hooks(True): the pack and unpack hooks a value saved now is packed with, None when there are
# none; where this torch cannot say, always "some" (a capture then leaves the build to read raw slots)
default_hooks: Callable[[bool], Any] = (torch._C._autograd._top_saved_tensors_default_hooks
                                        if CAPABILITIES["saved_hooks"] else (lambda _ignore_tracing: True))
SAVED_HOOKS = [0]  # hook pairs pushed or set by hand since count_saved_hooks() began (see there)


def count_saved_hooks() -> int | None:
    """How many saved-tensor hook pairs were pushed (`_push_saved_tensors_default_hooks`, which
    saved_tensors_hooks, save_on_cpu and checkpoint call) or set by hand (`node._raw_saved_x.register_hooks`)
    in this process, in any thread, since the count began, plus one if hooks were in effect then. It
    begins at the first call (made when capture.py is imported): that wraps both functions, which then
    count each call and hand it on unchanged, errors included; a reference to either taken before is
    not counted, nor a push from C++. None where this torch cannot count them."""
    if not CAPABILITIES["saved_hooks"]:
        return None
    module, kind = torch._C._autograd, torch._C._autograd.SavedTensor
    if not getattr(kind.register_hooks, "_tracekit_counts", False):
        if module._top_saved_tensors_default_hooks(True) is not None:
            SAVED_HOOKS[0] += 1
        module._push_saved_tensors_default_hooks = _counted(module._push_saved_tensors_default_hooks)
        kind.register_hooks = _counted(kind.register_hooks)
    return SAVED_HOOKS[0]


def _counted(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        SAVED_HOOKS[0] += 1  # (first: a pair set by a call that then fails still counts)
        return original(*args, **kwargs)

    counted._tracekit_counts = True  # type: ignore[attr-defined]
    return counted


# the graph ---------------------------------------------------------------------------------------

def backward_outputs(tb: Any) -> list[torch.Tensor]:
    """The tensors a failed backward started from, read from the engine's frame in its traceback
    `tb` (the innermost such frame; empty where this torch names the frame or its local otherwise)."""
    found: list[torch.Tensor] = []
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == ENGINE_FRAME:
            found = [t for t in frame.f_locals.get("t_outputs", ()) if isinstance(t, torch.Tensor)]
        tb = tb.tb_next
    return found


def sequence_nr(node: Any) -> int:
    """A node's sequence number: autograd's forward order (and the engine's priority)."""
    return node._sequence_nr()


SEQUENCE_NR: Callable[[Any], int] = operator.methodcaller("_sequence_nr")  # sequence_nr, as a key for hot loops
# the node the engine is about to run, inside a hook (None where this torch lacks it)
CURRENT_NODE: Callable[[], Any] | None = torch._C._current_autograd_node if CAPABILITIES["current_node"] else None
# which backward call (graph task) runs the hook that asks, -1 outside one (None where this torch lacks it)
GRAPH_TASK: Callable[[], int] | None = torch._C._current_graph_task_id if CAPABILITIES["graph_task"] else None
# the sequence number the next node made on this thread will get (None where this torch lacks it)
NEXT_SEQUENCE_NR: Callable[[], int] | None = (torch._C._autograd._get_sequence_nr
                                              if CAPABILITIES["sequence_counter"] else None)


VERSION: Callable[[torch.Tensor], int] = operator.attrgetter("_version")  # version(), as a getter for hot loops


def version(t: torch.Tensor) -> int:
    """A tensor's version counter (bumped by each in-place write)."""
    return t._version


class HookDict(dict):  # type: ignore[type-arg]
    """A hook dict (step key -> the function a node's tensor pre-hook calls) that can be weakly
    referenced: it lives as long as a node it was registered on (and a backward that uses it)."""

    __slots__ = ("__weakref__",)


HookDicts = tuple[HookDict, ...]


# each live hook dict (by the id of its weak reference): the reference, and the nodes it was
# registered on, as their sequence numbers, their ids (another thread's node may have the same number)
# and the lowest and highest number; forgotten when the dict goes (its last node freed)
_REGISTERED: dict[int, tuple[weakref.ref, list[int], list[int], int, int]] = {}


def _forget(ref: weakref.ref) -> None:
    _REGISTERED.pop(id(ref), None)


def _registered_on(graph_nodes: list[Any], seq: list[int], lo: int, hi: int) -> tuple[dict[int, HookDict], set[int]]:
    """The live hook dicts earlier traces registered on some of these nodes (by id), and those nodes'
    positions: only the dicts whose numbers overlap these (`lo` to `hi`) are read, node by node, and
    only while every node a dict was registered on lives (each holds one reference to it): a node's
    id is then its own (a freed node's id may be another's, with the same number on another thread).
    A dict one of whose nodes went is forgotten (its other nodes may get a second one)."""
    found: dict[int, HookDict] = {}
    covered: set[int] = set()
    at: dict[int, int] | None = None
    for key, (ref, numbers, ids, first, last) in _REGISTERED.copy().items():  # (a copy: other threads add)
        if first > hi or last < lo:
            continue
        hooks = ref()
        if hooks is None:
            continue
        held = sys.getrefcount(hooks) - 2  # (this name and the call's argument)
        if held < len(ids):  # a node it hooked went
            _REGISTERED.pop(key, None)
            continue
        if held > len(ids):  # held for a backward under way: not now
            continue
        if at is None:
            at = dict(zip(seq, range(len(seq))))
        for s, node_id in zip(numbers, ids):
            i = at.get(s)
            if i is not None and id(graph_nodes[i]) == node_id:
                covered.add(i)
                found[id(hooks)] = hooks
    return found, covered


def shared_hook_dict(graph_nodes: list[Any], seq: list[int] | None = None) -> HookDicts | None:
    """The empty hook dicts registered as the tensor pre-hook of the nodes in `graph_nodes` (the
    `current_node` capability; None where this torch lacks it), each node under one: PreHook fills
    them for one backward. Registered while the build holds the nodes, so observing needs no second
    walk of the graph; while empty, the engine calls no Python function for them. A node is
    registered once: a node an earlier trace registered keeps its dict (a graph traced again, one
    built on top of a traced one), and only the others get a new one; each registration is one more
    hook the engine checks in every backward, the user's own too. `seq`: the nodes' sequence numbers."""
    if not CAPABILITIES["current_node"] or not graph_nodes:
        return None
    if seq is None:
        seq = list(map(SEQUENCE_NR, graph_nodes))
    found, covered = _registered_on(graph_nodes, seq, min(seq), max(seq)) if _REGISTERED else ({}, set())
    fresh = graph_nodes
    if covered:
        fresh = [g for i, g in enumerate(graph_nodes) if i not in covered]
        seq = [s for i, s in enumerate(seq) if i not in covered]
    out = tuple(found.values())
    # in runs of 1, 2, 4, ... nodes from the last (the newest, in forward order): what goes first (a loss
    # rebound in a re-run cell, over an encoder that stays) leaves the dicts of the older runs whole
    end, size = len(fresh), 1
    while end > 0:
        start = max(0, end - size)
        out += (_register(fresh[start:end], seq[start:end]),)
        end, size = start, size * 2
    return out


def _register(nodes: list[Any], numbers: list[int]) -> HookDict:
    """A new hook dict registered on `nodes` (their sequence numbers: `numbers`), and noted."""
    hooks = HookDict()
    carrier = torch.empty(0)
    carrier._backward_hooks = hooks  # the dict every node's tensor pre-hook reads
    for g in nodes:
        g._register_hook_dict(carrier)
    ref = weakref.ref(hooks, _forget)
    _REGISTERED[id(ref)] = (ref, numbers, list(map(id, nodes)), min(numbers), max(numbers))
    return hooks


class PreHook:
    """One call of `step(grad, node)` as each node of `graph_nodes` is about to run. With the
    `current_node` capability and `hooks` (shared_hook_dict's dicts, registered at build): one tensor
    pre-hook shared by every node through its hook dict, called as `step(grad)`: the step asks the
    engine which node runs (CURRENT_NODE), so each step is one Python call. Otherwise a public
    `register_prehook` per node, called as `step(grads, node)`, removed after. `remove()` makes a
    later backward call nothing of ours."""

    def __init__(self, graph_nodes: list[Any] | None, step: Callable[..., None],
                 hooks: HookDicts | None = None) -> None:
        self.handles: list[Any] = []
        self.hooks: HookDicts = hooks or ()
        for d in self.hooks:
            d[0] = step
        if hooks is None:
            assert graph_nodes is not None, "no shared hook dict and no nodes to hook"
            self.handles = [g.register_prehook(lambda grads, g=g: step(grads, g)) for g in graph_nodes]

    def remove(self) -> None:
        """Detach: the nodes keep their empty hook dicts (or lose their pre-hooks)."""
        for d in self.hooks:
            d.clear()
        for h in self.handles:
            h.remove()


# storages ----------------------------------------------------------------------------------------

def storage_identity(storage: torch.UntypedStorage) -> int:
    """The identity of a storage without an address (meta, fake): its StorageImpl."""
    require("storage_identity", "telling apart storages that have no memory")
    return storage._cdata


def weak_ref(t: torch.Tensor) -> int:
    """A bare weak reference to the storage of `t` (what StorageWeakRef wraps, without the
    Python object): pass it to weak_expired, and to drop_weak_ref exactly once."""
    require("storage_weak_ref", "knowing when a storage's memory is really gone")
    return t.untyped_storage()._weak_ref()


def _absent(_ref: Any) -> Any:
    raise missing("storage_weak_ref", "knowing when a storage's memory is really gone")


# storage_weak_ref(storage): weak_ref for a storage already read (`t.untyped_storage()`), the same
# bare weak reference (the method itself where this torch has it: the build calls it per storage)
storage_weak_ref: Callable[[torch.UntypedStorage], int] = (torch.UntypedStorage._weak_ref
                                                         if CAPABILITIES["storage_weak_ref"] else _absent)

weak_expired: Callable[[int], bool] = (torch.UntypedStorage._expired if CAPABILITIES["storage_weak_ref"]
                                       else _absent)  # weak_expired(ref): True once the memory is gone
drop_weak_ref: Callable[[int], None] = (torch.UntypedStorage._free_weak_ref if CAPABILITIES["storage_weak_ref"]
                                        else _absent)  # type: ignore[assignment]


def fake_tensor_type() -> type | None:
    """FakeTensor's class if torch's fake-tensor module is loaded (it is never imported here)."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return getattr(fake, "FakeTensor", None) if fake is not None else None


# selective checkpointing's cache -----------------------------------------------------------------

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


def _checkpoint_frames(graph_nodes: list[Any]) -> list[Any]:
    """Checkpoint's frame per checkpointed region of these nodes (each once)."""
    frames: list[Any] = []
    for gnode in graph_nodes:
        frames.extend(f for f in checkpoint_frames_of(gnode) if not any(f is g for g in frames))
    return frames


def checkpoint_frames_of(gnode: Any) -> list[Any]:
    """The non-reentrant checkpoint frames whose unpack hooks hold this node's saved values."""
    found: list[Any] = []
    for raw in _raw_saved(gnode):
        hook = getattr(raw, "unpack_hook", None)
        if hook is None or not (getattr(hook, "__module__", "") or "").startswith("torch.utils.checkpoint"):
            continue
        frame = _cell_values(hook).get("frame")
        if frame is not None and not any(frame is f for f in found):
            found.append(frame)
    return found


def checkpoint_inputs(frame: Any) -> list[tuple[str, Any]]:
    """(the argument's name, its SavedTensor or tensor) for each tensor a non-reentrant checkpoint
    keeps to rerun its region's forward: the positional inputs (`saved_args`: SavedTensors, which
    saved-tensor hooks see) and keyword tensors (in the closure of its recompute function).
    Empty where a torch keeps them otherwise."""
    found: list[tuple[str, Any]] = []
    for k, arg in enumerate(getattr(frame, "saved_args", None) or ()):
        if hasattr(arg, "unpack_hook") or isinstance(arg, torch.Tensor):
            found.append((f"args[{k}]", arg))
    kwargs = _cell_values(getattr(frame, "recompute_fn", None)).get("kwargs")
    for name, value in (kwargs.items() if isinstance(kwargs, dict) else ()):
        if isinstance(value, torch.Tensor):
            found.append((f"kwargs[{name!r}]", value))
    return found


def module_call_code() -> Any:
    """The code object of `nn.Module._call_impl` (None where this torch lacks it)."""
    return torch.nn.Module._call_impl.__code__ if CAPABILITIES["module_frames"] else None


def module_wrapper_code() -> Any:
    """The code object of `nn.Module._wrapped_call_impl`, the frame that calls `_call_impl` with the
    same `self` and three locals (cheaper to read than `_call_impl`'s); None where this torch lacks it."""
    wrapped = getattr(torch.nn.Module, "_wrapped_call_impl", None)
    code = getattr(wrapped, "__code__", None)
    return code if code is not None and code.co_varnames[:1] == ("self",) else None


def compiled_original(module: torch.nn.Module) -> torch.nn.Module:
    """The module a `torch.compile`d wrapper (OptimizedModule) runs; the module itself otherwise.
    Read from the wrapper's own dicts: a failed `getattr` on a module raises in its `__getattr__`."""
    if "torch._dynamo" not in sys.modules:  # nothing was compiled: no wrapper exists
        return module
    own = getattr(module, "__dict__", None)
    if not isinstance(own, dict):
        return module
    original = own.get("_orig_mod")
    if original is None:
        children = own.get("_modules")
        original = children.get("_orig_mod") if isinstance(children, dict) else None
    return original if isinstance(original, torch.nn.Module) else module


def checkpoint_cache(graph_nodes: list[Any]) -> list[tuple[str, torch.Tensor]]:
    """(op, tensor) of each op output selective activation checkpointing keeps for these nodes'
    checkpointed regions, found through the closure cells of checkpoint's unpack hooks (empty
    without SAC, and where a torch names those cells otherwise)."""
    found: list[tuple[str, torch.Tensor]] = []
    for frame in _checkpoint_frames(graph_nodes):
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


# modes and the profiler --------------------------------------------------------------------------

if CAPABILITIES["dispatch_mode"]:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def flatten(tree: Any) -> list[Any]:
        """The leaves of a nest of tuples, lists and dicts (an op's arguments or outputs)."""
        return tree_flatten(tree)[0]
else:
    def flatten(tree: Any) -> list[Any]:
        """The leaves of a nest of tuples, lists and dicts (without torch's pytree)."""
        if isinstance(tree, dict):
            return [x for v in tree.values() for x in flatten(v)]
        if isinstance(tree, (tuple, list)):
            return [x for v in tree for x in flatten(v)]
        return [tree]

    class TorchDispatchMode:  # type: ignore[no-redef]
        """Stands in for torch's TorchDispatchMode where this torch has none: using it raises."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise missing("dispatch_mode", "watching each aten call while a step runs")


def closure_values(fn: Any) -> dict[str, Any]:
    """A function's closure cells by name (empty cells left out)."""
    return _cell_values(fn)


if CAPABILITIES["storage_ref"]:
    from torch.multiprocessing.reductions import StorageWeakRef as StorageRef
else:
    class StorageRef:  # type: ignore[no-redef]
        """Stands in for torch's StorageWeakRef where this torch has none: using it raises."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise missing("storage_ref", "a weak reference to a storage object")


def closure_cells(fn: Any) -> list[Any]:
    """The values in a function's closure cells (empty cells left out)."""
    return list(_cell_values(fn).values())


def module_entries(m: torch.nn.Module) -> tuple[Any, Any, Any]:
    """(its own parameters, its own buffers, its children) as nn.Module keeps them (`_parameters`,
    `_buffers`, `_modules`): named_parameters() / named_buffers() without their generator machinery."""
    return m._parameters.items(), m._buffers.items(), m._modules.items()


def profiler_event_types() -> Any:
    """torch._C._profiler._EventType (to read the CPU allocator's events)."""
    require("profiler_events", "reading the CPU allocator's events from the profiler")
    from torch._C._profiler import _EventType

    return _EventType
