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
tracekit, not at the next collection), and again a little later where kept nodes are left.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

DEEP = 20_000  # graphs with fewer nodes than this free safely on their own
SPACING = 2_000

_chains: list[list[Any]] = []
_holders: dict[int, int] = {}  # a kept node (by id: it is alive while kept) -> how many chains hold it
_lock = threading.RLock()
_busy = False  # a sweep or keep under way on the thread that holds _lock
# the outputs that went, each an Event set once it let go (a SimpleQueue: put is safe from any callback)
_requests: queue.SimpleQueue[threading.Event] = queue.SimpleQueue()
_soon = threading.RLock()  # guards _sweeping; nothing under it allocates (no collection starts there)
_sweeping = False  # a thread runs _sweep_while_asked (it looks at _requests again before it ends)
_SWEEPS = (0.01, 0.05, 0.25, 1.0)  # seconds after outputs went: a sweep at each, while kept nodes are left


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
    """An output of a kept graph is going (called as its Python object dies, before it lets go of its
    node: a sweep now would find the top still held): sweep once it is gone, from a thread of its own.
    Outputs that go while that thread runs are its next batch; none is left to the collection's sweep
    (which, with the collector off, never comes)."""
    global _sweeping
    ready = threading.Event()
    try:
        _requests.put(ready)
        with _soon:
            start, _sweeping = not _sweeping, True
        if start:
            try:
                threading.Thread(target=_sweep_while_asked, name="tracekit keeper", daemon=True).start()
            except BaseException as error:  # no thread to be had: the collection's sweep, as before
                with _soon:
                    _sweeping = False
                if not isinstance(error, RuntimeError):
                    raise
    finally:
        ready.set()  # the last thing here: the caller lets go of the node before it lets go of the interpreter


def _sweep_while_asked() -> None:
    """The sweeps the outputs that went ask for, batch by batch until none is left: once every output of a
    batch has let go (a moment after), and again later while kept nodes are left, unless more outputs go
    first (the thread that freed an output may pause, on a loaded machine, after telling and before letting
    go of its node: a sweep that came too early is made good by a later one; each look at a node something
    else holds is one refcount). A sweep that raises ends the thread: the next output starts another."""
    global _sweeping
    ended = False
    try:
        batch: list[threading.Event] = []
        while True:
            batch += _asked()
            if not batch:
                with _soon:  # (_sweep_soon puts, then looks at _sweeping under _soon)
                    if _requests.empty():
                        _sweeping, ended = False, True
                        return
                continue
            for ready in batch:
                ready.wait()
            batch = []
            time.sleep(_SWEEPS[0])
            sweep()
            slept = _SWEEPS[0]
            for at in _SWEEPS[1:]:
                if not _chains:  # all let go
                    break
                try:
                    batch.append(_requests.get(timeout=at - slept))  # more outputs went: their batch next
                    break
                except queue.Empty:
                    slept = at
                    sweep()
    finally:
        if not ended:
            with _soon:
                _sweeping = False


def _asked() -> list[threading.Event]:
    """The outputs that went and no sweep has been made for yet (without waiting)."""
    found = []
    while True:
        try:
            found.append(_requests.get_nowait())
        except queue.Empty:
            return found


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
    if phase != "stop" or not _chains:
        return
    if not sys.is_finalizing():
        sweep()  # (waits for another thread's sweep: nothing that holds _soon allocates, so none starts a collection)
    elif _lock.acquire(blocking=False):  # at exit the keeper's thread may have been stopped for good holding _lock
        try:
            sweep()
        finally:
            _lock.release()


def _at_exit() -> None:
    sweep()
    # what is still held (an output alive in a module global) would cascade during
    # interpreter teardown: hold it forever instead; the OS reclaims the memory
    for chain in _chains:
        for node in chain:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(node))


def _after_fork() -> None:
    """A forked child has only the forking thread: a lock another thread held (the keeper's sweep) would
    stay held there for ever, and no thread sweeps there."""
    global _lock, _busy, _soon, _requests, _sweeping
    _lock, _busy = threading.RLock(), False
    _soon, _requests, _sweeping = threading.RLock(), queue.SimpleQueue(), False


gc.callbacks.append(_on_gc)
atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork)
