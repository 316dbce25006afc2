"""Garbage-collector care: safe teardown for very deep graphs that tracekit has walked, and
pausing the cycle collector while tracekit makes many small objects.

Since PyTorch moved autograd nodes to intrusive_ptr (2.13), a node that Python has
touched is owned through its Python wrapper, and freeing a long chain of such nodes
recurses once per node (THPCppFunction_dealloc -> ~Node -> decref -> ...): a chain of
~60,000 walked nodes overflows the C stack when the user drops the output. tracekit
walks every node, so for deep graphs it keeps every SPACING-th node alive; when the
rest of the graph is gone it lets them go top-down, each drop freeing at most SPACING
nodes. Shallow graphs (the usual case) are not touched. A graph traced more than once (a cell
run again, an output built on top) is kept by each trace's chain: a kept node counts as free of
others when only chains hold it, and the last chain to let it go frees it. The sweep runs at each
collection and a moment after a traced output goes (`del y` frees the graph then, as without
tracekit, not at the next collection).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

DEEP = 20_000  # graphs with fewer nodes than this free safely on their own
SPACING = 2_000

_chains: list[list[Any]] = []
_holders: dict[int, int] = {}  # a kept node (by id: it is alive while kept) -> how many chains hold it
_lock = threading.RLock()
_busy = False  # a sweep or keep under way on the thread that holds _lock
_timer: threading.Timer | None = None  # the sweep a traced output's end started, while it waits or runs


def keep(graph_nodes: list[Any], outputs: tuple[Any, ...] = ()) -> None:
    """Hold every SPACING-th node (in forward order) of a deep graph until it is safe to free;
    `outputs`: the tensors the graph was walked from, whose end lets it go at once (`del y`), not
    at the next collection."""
    if len(graph_nodes) < DEEP:
        return
    for t in outputs:
        with contextlib.suppress(TypeError):  # a tensor that takes no weak reference: the collection's sweep
            weakref.finalize(t, _sweep_soon).atexit = False  # (at exit: _at_exit)
    chain = list(graph_nodes[::SPACING])
    if chain[-1] is not graph_nodes[-1]:
        chain.append(graph_nodes[-1])
    global _busy
    with _lock:
        _busy = True
        try:
            for node in chain:  # a graph traced again (or from another output) is kept by each of its chains
                _holders[id(node)] = _holders.get(id(node), 0) + 1
            _chains.append(chain)
        finally:
            _busy = False
    sweep()


def _sweep_soon() -> None:
    """An output of a kept graph is going: sweep once it is gone (called as its Python object dies,
    before it lets go of its node: a sweep now would find the top still held), from a short-lived
    thread, after a moment (a sweep that comes too early leaves it to the collection's, as before);
    one at a time: outputs that go together (a graph traced many times) share it."""
    global _timer
    if _timer is not None and _timer.is_alive():
        return
    _timer = threading.Timer(0.01, sweep)
    _timer.daemon = True
    _timer.start()


def sweep() -> None:
    """Release the kept nodes that nothing else holds, from the top of each chain down."""
    global _busy
    if not _chains:
        return
    with _lock:  # another thread's sweep or keep: wait for it (the wait lets go of the interpreter lock)
        if _busy:  # this thread's own, under way (a collection started inside it)
            return
        _busy = True
        try:
            _release()
        finally:
            _busy = False


def _release() -> None:
    """sweep()'s work, under the lock: round the chains until nothing more is let go."""
    released = True
    while released:  # a node two chains hold is let go by one and freed by the other: go round again
        released = False
        for chain in list(_chains):
            # the chains that hold it + getrefcount's own argument: no one else holds it
            while chain and sys.getrefcount(chain[-1]) <= 1 + _holders[id(chain[-1])]:
                key = id(chain[-1])
                left = _holders.pop(key) - 1
                if left:
                    _holders[key] = left
                chain.pop()  # the last chain's frees it and what hangs below, down to the next kept node
                released = True
            if not chain:
                _chains.remove(chain)


def pending() -> int:
    """How many kept nodes are still waiting to be released (for tests)."""
    return sum(len(c) for c in _chains)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cycle collector while making many small objects (it would rescan them all)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and _chains:
        sweep()


def _at_exit() -> None:
    sweep()
    # what is still held (an output alive in a module global) would cascade during
    # interpreter teardown: hold it forever instead; the OS reclaims the memory
    for chain in _chains:
        for node in chain:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(node))


def _after_fork() -> None:
    """A forked child has only the forking thread: a lock another thread held (a timer's sweep) would
    stay held there for ever."""
    global _lock, _busy, _timer
    _lock, _busy, _timer = threading.RLock(), False, None


gc.callbacks.append(_on_gc)
atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork)
