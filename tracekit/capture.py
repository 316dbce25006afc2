"""Recording: `tk.capture()` watches each torch call (its source line, the call's name, the
module whose forward made it, in-place writes) while the forward runs; `cap.trace(y)` and
`tk.trace(y)` hand the graph to build.py."""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable
from itertools import islice
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .build import Mutations, Sources, build_trace
from .errors import NestedCaptureError
from .frames import SKIPPED, Names, caller_names, is_skipped, module_paths, module_tree, name_module, where
from .internals import (
    NEXT_SEQUENCE_NR,
    SEQUENCE_NR,
    compiled_original,
    count_saved_hooks,
    default_hooks,
    module_call_code,
    module_wrapper_code,
    version,
)
from .keeper import gc_paused
from .rows import Mutation
from .storage import storage_key
from .trace import Trace

_active = threading.local()
_getframe = sys._getframe
_compiling = torch.compiler.is_compiling
count_saved_hooks()  # saved-tensor hooks counted from now on (HookWatch)
_NEXT_SEQUENCE_NR = NEXT_SEQUENCE_NR
_CALLS: dict[Any, tuple[str, bool]] = {}  # torch function -> (its name, whether it writes in place)
_CALLS_KEPT = 4096  # at most this many
BACKWARDS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
_BACKWARD, _AUTOGRAD_BACKWARD, _GRAD = BACKWARDS
OnBackward = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]  # (func, args, kwargs) -> its result


def _is_inplace(call: str) -> bool:
    return (call.endswith("_") and not call.startswith("_")) or (call.startswith("__i") and call.endswith("__"))


def _call_info(func: Any) -> tuple[str, bool]:
    """(a torch call's name, whether it writes into its first argument), kept per function (a
    builtin's `__name__` is a new string at every read)."""
    call = getattr(func, "__name__", None) or str(func)
    info = (call, _is_inplace(call))
    if len(_CALLS) >= _CALLS_KEPT:  # functions made at run time (a Function class per cell run): keep no pile
        _CALLS.clear()
    with contextlib.suppress(TypeError):  # an unhashable callable: read each time
        _CALLS[func] = info
    return info


class HookWatch:
    """Whether a value saved under a capture may carry a saved-tensor hook (a checkpoint's, save_on_cpu's,
    the user's): yes once any hook pair was pushed or set by hand in this process, in any thread
    (internals.count_saved_hooks, from tracekit's import on: a graph begun elsewhere, a subclass or a
    mode that pushes hooks inside one call, a gradient hook inside backward are all counted), or where
    hooks pushed from C++ were in effect at a call it recorded (`seen`). Where neither, no saved value
    carries one, and the build reads no raw slot to find out for the nodes the capture's calls made."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False  # a call made nodes under default hooks (set by the recorder)

    def none(self) -> bool:
        """No value saved under the capture can carry a hook."""
        return not self.seen and count_saved_hooks() == 0


class _Recorder(TorchFunctionMode):
    """Sees each torch call; gives the nodes it created their source line and call name,
    and remembers in-place calls (which bump a tensor's version counter) and whether saved-tensor
    hooks were in effect (`hooks`)."""

    def __init__(self, sources: Sources, mutations: Mutations, modules: _ModulePath,
                 hooks: HookWatch, on_backward: OnBackward | None = None) -> None:
        super().__init__()
        self.sources = sources
        self.mutations = mutations
        self.modules = modules
        self.on_backward = on_backward
        self.hooks = hooks

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if _compiling():  # dynamo traces this mode into a compiled region: record nothing there, so
            return func(*args, **(kwargs or {}))  # the region compiles as it does without capture
        if func is _BACKWARD or func is _AUTOGRAD_BACKWARD or func is _GRAD:  # in BACKWARDS, by identity
            # backward frees what the forward saved: capture must hold none of the user's frames then
            self.modules.forget()
            if self.on_backward is not None:
                return self.on_backward(func, args, kwargs or {})
        counter = _NEXT_SEQUENCE_NR
        if counter is not None:  # the nodes the call makes: the sequence numbers it takes (no grad_fn read)
            start = counter()
            result = func(*args, **kwargs) if kwargs else func(*args)
            end = counter()
        else:
            result = func(*args, **(kwargs or {}))
            start, end = _nodes_of(result)
        try:
            call, inplace = _CALLS[func]
        except (KeyError, TypeError):  # a function not seen yet (or an unhashable callable)
            call, inplace = _call_info(func)
        if end > start:
            if default_hooks(True) is not None:  # hooks in effect (pushed from C++ too): what it saved may
                self.hooks.seen = True  # carry them, and the build reads raw slots
            if start not in self.sources:
                modules = self.modules
                # locate(), inline where the frame is the last call's (a loop): the frames above it are the same
                user, module = modules.found if _getframe(1) is modules.caller else modules.locate()
                # every node it made gets its line in build.py (read there from the code and offset)
                self.sources[start] = (end, user.f_code, user.f_lasti, call) if user is not None else \
                    (end, None, 0, call)
                if module is not None:
                    modules.of[start] = module
        if inplace and args and isinstance(args[0], torch.Tensor) and args[0].layout == torch.strided:
            mutated = args[0]
            self.mutations.append(Mutation(call, where(self.modules.locate()[0]), storage_key(mutated),
                                           version(mutated)))
            if counter is not None:
                self.mutations.ends.append(end)
        return result


def _nodes_of(result: Any) -> tuple[int, int]:
    """The sequence numbers of the nodes behind a call's outputs, as a range (where this torch cannot
    say which numbers a call took: the nodes it made on the way to its outputs get no line)."""
    seqs = [SEQUENCE_NR(t.grad_fn) for t in _tensors_in(result) if t.grad_fn is not None]
    return (min(seqs), max(seqs) + 1) if seqs else (0, 0)


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return []


class _ModulePath:
    """Which modules' forwards are running, read where they are called: the frames of
    `nn.Module._call_impl` between a torch call and where recording started (no global module
    hook, so a compiled model runs as it does without capture). `of`: a call (its first sequence
    number) -> (the innermost module, the outermost one), as indexes into `modules` (the module
    objects, kept until the trace is built); labels are resolved at build."""

    def __init__(self) -> None:
        self.modules: list[torch.nn.Module] = []
        self.index: dict[torch.nn.Module, int] = {}
        self.of: dict[int, tuple[int, int]] = {}  # a call's first sequence number -> its modules
        self.trees: dict[int, list[tuple[str, Any, Any, Any]]] = {}  # module index -> its tree, once read
        self.top: Any = None  # the frame recording started in: module calls lie below it
        self.outer: Any = None  # the outermost module call's frame at the last torch call (until the next)
        self.outer_k = -1  # and its module
        self.outers: set[int] = set()  # the outermost modules of the calls in `of` read so far
        self.outers_read = 0  # (how many of `of` those are)
        self.caller: Any = None  # the frame that made the last torch call (until the next) and what
        self.found: tuple[Any, tuple[int, int] | None] = (None, None)  # locate() found above it

    def start(self, top: Any) -> None:
        self.top = top

    def stop(self) -> None:
        self.top = None
        self.forget()  # hold no frame once recording stopped

    def forget(self) -> None:
        """Let go of the frames kept from the last torch call (the next call walks the stack again):
        a frame kept after its function returned keeps its locals, and with them tensors that a
        trace or a backward would otherwise see freed."""
        self.outer = self.caller = None
        self.found = (None, None)

    def locate(self) -> tuple[Any, tuple[int, int] | None]:
        """(the user's frame of the running torch call, its (innermost, outermost) module or None
        outside any module), in one walk up the stack from the torch call; a frame that makes
        call after call (a loop) is walked once: the frames above a running one do not change."""
        frame = sys._getframe(2)  # the caller of __torch_function__
        if frame is self.caller:
            return self.found
        # a generator's frame may resume under other callers: walked at each call
        self.caller = frame if not frame.f_code.co_flags & _SUSPENDS else None
        found = self.found = self._walk(frame)
        return found

    def _walk(self, frame: Any) -> tuple[Any, tuple[int, int] | None]:
        code, known, top = _CALL_CODE, SKIPPED, self.top
        user = inner = outer = None
        while frame is not None and frame is not top:
            f_code = frame.f_code
            if f_code is code:  # a module's call (torch's own file: never the user's frame)
                if inner is None:
                    inner = frame
                outer = frame
            elif user is None:
                skip = known.get(f_code.co_filename)
                if not (is_skipped(frame) if skip is None else skip):
                    user = frame
            frame = frame.f_back
        while user is None and frame is not None:  # recording started in a frame that is not the user's
            skip = known.get(frame.f_code.co_filename)
            if not (is_skipped(frame) if skip is None else skip):
                user = frame
            frame = frame.f_back
        if inner is None:
            self.outer = None
            return user, None
        if outer is not self.outer:  # a model's frame stays for all its calls: its module is read once
            self.outer, self.outer_k = outer, self._number(_self_of(outer))
        return user, (self.outer_k if inner is outer else self._number(_self_of(inner)), self.outer_k)

    def _number(self, module: Any) -> int:
        k = self.index.get(module)  # the module as called (a compiled wrapper: the module it runs)
        if k is None:
            original = compiled_original(module)
            k = self.index.get(original)
            if k is None:
                k = self.index[original] = len(self.modules)
                self.modules.append(original)
            self.index[module] = k
        return k

    def names(self, names: Names, named: list[tuple[torch.nn.Module, list[tuple[str, Any, Any, Any]]]]) -> Names:
        """`names` with the parameters and buffers of the outermost modules called that the
        caller's code does not name, under the module's class (`ResNet.bn1.running_mean`);
        `named`: the modules whose trees `names` has already, with their trees (nothing of theirs to add)."""
        self.outers.update(outer for _, outer in islice(self.of.values(), self.outers_read, None))
        self.outers_read = len(self.of)  # (a capture over a long loop: only the calls since the last trace)
        for k in sorted(self.outers):
            root = self.modules[k]
            tree = next((t for m, t in named if m is root), None)
            if tree is None:
                name_module(names, root, type(root).__name__, self.tree(k))
            else:
                self.trees[k] = tree  # read for its names already: its labels read it too
        return names

    def tree(self, k: int) -> list[tuple[str, Any, Any, Any]]:
        """Module k's frames.module_tree, read once for its parameters' names and its modules' labels."""
        tree = self.trees.get(k)
        if tree is None:
            tree = self.trees[k] = module_tree(self.modules[k])
        return tree

    def labels(self) -> _Labels:
        """Each recorded call's module label, made when the build asks for a call's (only those of
        the traced graph: a capture kept over a long loop has seen many more)."""
        return _Labels(self)


class _Labels:
    """A call's module label (`get(first sequence number)`): `self_attn (MultiheadAttention)` (its path
    in the outermost module's `named_modules()`, then its class; the outermost is its class alone), or
    `CrossEntropyLoss (made during the call)` for a module outside that tree; None outside modules."""

    def __init__(self, path: _ModulePath) -> None:
        self.path = path
        self.paths: dict[int, dict[torch.nn.Module, str]] = {}
        self.words: dict[tuple[int, int], str] = {}

    def __bool__(self) -> bool:
        return bool(self.path.of)

    def get(self, seq: int) -> str | None:
        pair = self.path.of.get(seq)
        if pair is None:
            return None
        label = self.words.get(pair)
        if label is None:
            inner, outer = pair
            modules = self.path.modules
            if outer not in self.paths:
                self.paths[outer] = module_paths(modules[outer], self.path.tree(outer))
            module = modules[inner]
            kind = type(module).__name__
            where = self.paths[outer].get(module)
            label = self.words[pair] = (kind if where == "" else f"{where} ({kind})" if where is not None
                                        else f"{kind} (made during the call)")
        return label


_CALL_CODE = module_call_code()
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR  # a frame that can suspend
_WRAPPER_CODE = module_wrapper_code()


def _self_of(call_frame: Any) -> Any:
    """The module of a `_call_impl` frame, read from its caller `_wrapped_call_impl` (the same
    `self`, fewer locals to copy out) where that is the caller."""
    back = call_frame.f_back
    frame = back if back is not None and back.f_code is _WRAPPER_CODE else call_frame
    return frame.f_locals.get("self")


class CaptureSession:
    """What capture records (sources, module paths, in-place calls) for a tool that wraps user code
    (tk.explain): any number at once, each a mode on the stack; `on_backward` runs in place of each
    backward / autograd.grad call made while it records."""

    def __init__(self, on_backward: OnBackward | None = None) -> None:
        self.sources: Sources = {}
        self.mutations = Mutations()
        self.modules = _ModulePath()
        self.hooks = HookWatch()
        self._mode = _Recorder(self.sources, self.mutations, self.modules, self.hooks, on_backward)
        self.threads: set[threading.Thread] = set()  # the threads it recorded in (each has its own numbers)

    def start(self) -> None:
        """Record from now on."""
        self.threads.add(threading.current_thread())
        self.modules.start(sys._getframe(1))
        self._mode.__enter__()

    def stop(self) -> None:
        """Stop recording (what was recorded stays)."""
        self._mode.__exit__(None, None, None)
        self.modules.stop()

    def trace(self, *outputs: torch.Tensor) -> Trace:
        """The trace of the graph behind `outputs`, with what was recorded."""
        return _trace_recorded(outputs, self.sources, self.mutations, self.modules, None, len(self.threads) <= 1,
                               self.hooks.none())


class capture:
    """Context manager: record forward ops with their source lines, then `cap.trace(y)`."""

    def __init__(self) -> None:
        self.sources: Sources = {}
        self.mutations = Mutations()
        self.modules = _ModulePath()
        self.hooks = HookWatch()
        self._mode: _Recorder | None = None
        self.threads: set[threading.Thread] = set()  # the threads it recorded in (each has its own numbers)

    def __enter__(self) -> capture:
        if getattr(_active, "capture", None) is not None:
            raise NestedCaptureError(
                "tk.capture() is already active: close the outer `with tk.capture()` block "
                "first, or trace everything from the outer one."
            )
        _active.capture = self
        self.threads.add(threading.current_thread())
        self._mode = _Recorder(self.sources, self.mutations, self.modules, self.hooks)
        self.modules.start(sys._getframe(1))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._mode is not None
        self._mode.__exit__(*exc)
        self.modules.stop()
        self._mode = None
        _active.capture = None

    def trace(self, *outputs: torch.Tensor, progress: bool | None = None) -> Trace:
        """The trace of the graph behind `outputs`, with forward order and source lines
        (`progress`: a progress bar on stderr; None: only for traces taking over 2 s)."""
        return _trace_recorded(outputs, self.sources, self.mutations, self.modules, progress, len(self.threads) <= 1,
                               self.hooks.none())


def _trace_recorded(outputs: tuple[torch.Tensor, ...], sources: Sources, mutations: Mutations,
                    modules: _ModulePath, progress: bool | None, one_thread: bool, unhooked: bool = False) -> Trace:
    """The trace of the graph behind `outputs`, with what a recorder saw (its sources, in-place
    calls and modules) and the names the caller (three frames up) gives tensors and parameters
    (`one_thread`: it recorded in one thread, whose sequence numbers never repeat; `unhooked`: no value
    saved under it carries a saved-tensor hook, HookWatch.none())."""
    modules.forget()  # the frame of the last torch call may have returned: its locals are not the graph's
    with gc_paused():  # names, labels and the record: many small objects, one collection after
        named: list[tuple[torch.nn.Module, list[tuple[str, Any, Any, Any]]]] = []
        names = modules.names(caller_names(named), named)
        try:
            trace = build_trace(outputs, sources, names, mutations, progress, modules.labels(), _temporaries(outputs),
                                exact=one_thread and _NEXT_SEQUENCE_NR is not None, unhooked=unhooked)
        finally:
            modules.trees.clear()  # read again by the next trace (a model may change between)
        del named, names  # the modules' trees read for names: gone before the collector resumes, not scanned
    return trace


def trace(*outputs: torch.Tensor, progress: bool | None = None) -> Trace:
    """The trace of any tensor's autograd graph (graph walk only: no source lines;
    `progress`: a progress bar on stderr; None: only for traces taking over 2 s). An output
    nobody else holds (`tk.trace(f(x))`) is kept by the trace, so `.backward()` on it works."""
    with gc_paused():  # the names and the record: many small objects, one collection after
        return build_trace(outputs, None, caller_names(), progress=progress, kept=_temporaries(outputs))


def _temporaries(outputs: tuple[Any, ...]) -> tuple[bool, ...]:
    """Per output: whether nothing but this call holds it (`tk.trace(f(x))`): the trace is then the
    only way to that graph and keeps it; an output the caller holds is held weakly, so `del y`
    frees its graph as in plain PyTorch. (References: the call's tuple, the loop, getrefcount.)"""
    return tuple(sys.getrefcount(t) <= 3 for t in outputs)
