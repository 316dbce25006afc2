"""Recording: `tk.capture()` watches each torch call (its source line, the call's name, in-place
writes) while the forward runs; `cap.trace(y)` and `tk.trace(y)` hand the graph to build.py."""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .build import Sources, build_trace
from .errors import NestedCaptureError
from .frames import caller_names, user_frame, where
from .internals import sequence_nr, version
from .model import Mutation, Trace
from .storage import storage_key

_active = threading.local()
_INPLACE: dict[str, bool] = {}  # call name -> whether it writes into its first argument


def _is_inplace(call: str) -> bool:
    return (call.endswith("_") and not call.startswith("_")) or (call.startswith("__i") and call.endswith("__"))


class _Recorder(TorchFunctionMode):
    """Sees each torch call; gives the nodes it created their source line and call name,
    and remembers in-place calls (which bump a tensor's version counter)."""

    def __init__(self, sources: Sources, mutations: list[Mutation]) -> None:
        super().__init__()
        self.sources = sources
        self.mutations = mutations

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
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
            for root in roots:  # nodes the call made on the way to its outputs get their source in build.py
                self.sources.setdefault(sequence_nr(root), (line, call))
            if mutated is not None and mutated.layout == torch.strided:
                self.mutations.append(Mutation(call, line, storage_key(mutated), version(mutated)))
        return result


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return []


class capture:
    """Context manager: record forward ops with their source lines, then `cap.trace(y)`."""

    def __init__(self) -> None:
        self.sources: Sources = {}
        self.mutations: list[Mutation] = []
        self._mode: _Recorder | None = None

    def __enter__(self) -> capture:
        if getattr(_active, "capture", None) is not None:
            raise NestedCaptureError(
                "tk.capture() is already active: close the outer `with tk.capture()` block "
                "first, or trace everything from the outer one."
            )
        _active.capture = self
        self._mode = _Recorder(self.sources, self.mutations)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._mode is not None
        self._mode.__exit__(*exc)
        self._mode = None
        _active.capture = None

    def trace(self, *outputs: torch.Tensor, progress: bool | None = None) -> Trace:
        """The trace of the graph behind `outputs`, with forward order and source lines
        (`progress`: a progress bar on stderr; None: only for traces taking over 2 s)."""
        return build_trace(outputs, self.sources, caller_names(), self.mutations, progress)


def trace(*outputs: torch.Tensor, progress: bool | None = None) -> Trace:
    """The trace of any tensor's autograd graph (graph walk only: no source lines;
    `progress`: a progress bar on stderr; None: only for traces taking over 2 s)."""
    return build_trace(outputs, None, caller_names(), progress=progress)
