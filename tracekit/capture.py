"""Recording: `tk.capture()` watches each torch call (its source line, the call's name, the
module whose forward made it, in-place writes) while the forward runs; `cap.trace(y)` and
`tk.trace(y)` hand the graph to build.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .build import Modules, Sources, build_trace
from .errors import NestedCaptureError
from .frames import caller_names, user_frame, where
from .internals import sequence_nr, version
from .rows import Mutation
from .storage import storage_key
from .trace import Trace

_active = threading.local()
_INPLACE: dict[str, bool] = {}  # call name -> whether it writes into its first argument
BACKWARDS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
OnBackward = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]  # (func, args, kwargs) -> its result


def _is_inplace(call: str) -> bool:
    return (call.endswith("_") and not call.startswith("_")) or (call.startswith("__i") and call.endswith("__"))


class _Recorder(TorchFunctionMode):
    """Sees each torch call; gives the nodes it created their source line and call name,
    and remembers in-place calls (which bump a tensor's version counter)."""

    def __init__(self, sources: Sources, mutations: list[Mutation], modules: _ModulePath,
                 on_backward: OnBackward | None = None) -> None:
        super().__init__()
        self.sources = sources
        self.mutations = mutations
        self.modules = modules
        self.on_backward = on_backward

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.on_backward is not None and func in BACKWARDS:
            return self.on_backward(func, args, kwargs or {})
        result = func(*args, **(kwargs or {}))
        call = getattr(func, "__name__", None) or str(func)
        if isinstance(result, torch.Tensor):  # the common case, without building lists
            fn = result.grad_fn
            roots = (fn,) if fn is not None else ()
        else:
            roots = tuple(t.grad_fn for t in _tensors_in(result) if t.grad_fn is not None)
        inplace = _INPLACE.get(call)
        if inplace is None:
            inplace = _INPLACE[call] = _is_inplace(call)
        mutated = args[0] if inplace and args and isinstance(args[0], torch.Tensor) else None
        if roots or mutated is not None:
            line = where(user_frame())
            module = self.modules.stack[-1] if self.modules.stack else None
            for root in roots:  # nodes the call made on the way to its outputs get their source in build.py
                seq = sequence_nr(root)
                self.sources.setdefault(seq, (line, call))
                if module is not None:
                    self.modules.of.setdefault(seq, module)
            if mutated is not None and mutated.layout == torch.strided:
                self.mutations.append(Mutation(call, line, storage_key(mutated), version(mutated)))
        return result


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return []


class _ModulePath:
    """Which module's forward is running, kept by process-wide module hooks while capture is on:
    `stack` of labels (`self_attn (MultiheadAttention)`: the path inside the outermost module
    called, then its class; the outermost is its class alone); `of`: a call's output node
    (sequence number) -> the label."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.paths: dict[torch.nn.Module, str] = {}
        self.of: Modules = {}
        self._handles: list[Any] = []

    def start(self) -> None:
        hooks = torch.nn.modules.module
        self._handles = [hooks.register_module_forward_pre_hook(self._enter),
                         hooks.register_module_forward_hook(self._leave, always_call=True)]

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.stack.clear()

    def _enter(self, module: torch.nn.Module, _args: Any) -> None:
        if not self.stack:  # the outermost module: name its submodules by their paths
            self.paths = {m: name for name, m in module.named_modules()}
        path = self.paths.get(module)
        kind = type(module).__name__
        if path is None:  # a module outside the outermost one's tree
            path = f"{self.stack[-1].split(' (')[0]}.{kind}" if self.stack else ""
        self.stack.append(f"{path} ({kind})" if path else kind)

    def _leave(self, _module: torch.nn.Module, _args: Any, _output: Any) -> None:
        if self.stack:
            self.stack.pop()


class CaptureSession:
    """What capture records (sources, module paths, in-place calls) for a tool that wraps user code
    (tk.explain): any number at once, each a mode on the stack; `on_backward` runs in place of each
    backward / autograd.grad call made while it records."""

    def __init__(self, on_backward: OnBackward | None = None) -> None:
        self.sources: Sources = {}
        self.mutations: list[Mutation] = []
        self.modules = _ModulePath()
        self._mode = _Recorder(self.sources, self.mutations, self.modules, on_backward)

    def start(self) -> None:
        """Record from now on."""
        self.modules.start()
        self._mode.__enter__()

    def stop(self) -> None:
        """Stop recording (what was recorded stays)."""
        self._mode.__exit__(None, None, None)
        self.modules.stop()

    def trace(self, *outputs: torch.Tensor) -> Trace:
        """The trace of the graph behind `outputs`, with what was recorded."""
        return build_trace(outputs, self.sources, caller_names(), self.mutations, None, self.modules.of)


class capture:
    """Context manager: record forward ops with their source lines, then `cap.trace(y)`."""

    def __init__(self) -> None:
        self.sources: Sources = {}
        self.mutations: list[Mutation] = []
        self.modules = _ModulePath()
        self._mode: _Recorder | None = None

    def __enter__(self) -> capture:
        if getattr(_active, "capture", None) is not None:
            raise NestedCaptureError(
                "tk.capture() is already active: close the outer `with tk.capture()` block "
                "first, or trace everything from the outer one."
            )
        _active.capture = self
        self._mode = _Recorder(self.sources, self.mutations, self.modules)
        self.modules.start()
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
        return build_trace(outputs, self.sources, caller_names(), self.mutations, progress, self.modules.of)


def trace(*outputs: torch.Tensor, progress: bool | None = None) -> Trace:
    """The trace of any tensor's autograd graph (graph walk only: no source lines;
    `progress`: a progress bar on stderr; None: only for traces taking over 2 s)."""
    return build_trace(outputs, None, caller_names(), progress=progress)
