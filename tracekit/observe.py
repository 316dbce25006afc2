"""Observed backward: the real reverse order, when autograd releases each residual,
and when each storage's memory actually goes away.

One Python hook serves the whole backward: every traced node gets the same tensor pre-hook
(a shared hook dict, so registering costs no Python call per node), and the hook asks the
engine which node is about to run (internals.PreHook; a public pre-hook per node where this
torch lacks that). An `Observer` turns those calls into
steps: before recording a node it settles the previous step, the one whose rule ran last, and
which watched storages died since. Its node's saved values are released: the engine releases
a rule's saved values as the rule returns, before it starts the next one (`evaluate_function`:
the rule, then `release_variables()` unless the graph is kept). That holds between two steps of
the observed backward call; a step of another one (a backward a rule or hook starts inside it,
or another thread's: its own graph task, which may keep its graph, and may run inside the rule
before) and the last step (backward may have raised in its rule) are read from one raw slot
instead (nothing unpacked). A step read as not released (its rule was still running: it started
another backward call, or another thread's step came first; or its call keeps its graph) is read
again when its call's next step starts, and its values are released at its own step once they are.
Another call's step is recorded once a pre-hook of its node says the node runs (its output's hooks,
ours among them, are also called where a grad only takes the gradient there). With retain_graph the
observed call releases nothing: only the other calls' steps are read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from .errors import NotObservableError
from .internals import CURRENT_NODE, GRAPH_TASK, SEQUENCE_NR, PreHook, is_released
from .keeper import gc_paused
from .lifetimes import OBSERVED, OUTSIDE, RETAINED, Lifetime, Lifetimes, fixed_note, storage_holder
from .live import Live
from .reader import Step, TraceData
from .rows import Status
from .storage import weak_expired

_NONE: tuple[int, ...] = ()  # a step that released (or freed) nothing
_Late = dict[Any, dict[int, tuple[int, Any, tuple[int, ...]]]]  # backward call -> node index -> (step, node, values)
END = object()  # the node of the step after the last: Observer.finish settles the last step with it
RUNS = object()  # the gradient of a step _wait's pre-hook tells: the node runs in another backward call
_NO_NODE = ("tr.backward() cannot observe this backward: PyTorch ran the traced nodes' hooks with no node "
            "running, as compiled autograd does (it runs the backward as one compiled graph, not node by "
            "node). Run tr.backward() without compiled autograd, or read tr.predict_backward().")


class Observer:
    """Turns 'this node is about to run' into steps, releases and frees (the trace's observed
    lifetimes once finished); the record is only read (by column). Each residual's Lifetime is
    made when it is first read, from the step lists kept here."""

    def __init__(self, trace: TraceData, index_of: Callable[[int], int | None], keep: bool,
                 on_step: Callable[[Step], None] | None = None, key: Callable[[Any], int] = id) -> None:
        self.trace = trace
        self.record = record = trace.record
        self.weaks = trace._data.weaks or ()
        self.keep = keep
        self.on_step = on_step
        self.index_of = index_of  # key(graph node) -> its index in the record (None: not in this trace)
        self.key = key  # a node's sequence number (SEQUENCE_NR) or its id
        self.order: list[int] = []  # node index per step
        self.released: list[tuple[int, ...]] = []  # per step: residual indexes
        self.freed: list[tuple[int, ...]] = []  # per step: storage indexes
        self.released_at: list[int | None] = [None] * record.n_residuals
        self.freed_at: list[int | None] = [None] * record.n_storages
        self.error: str | None = None
        self.unreleased: dict[int, int] = {}  # storage -> its residuals autograd still holds
        self.pending: list[int] = []  # storages let go of by the graph, not yet freed
        self._step: Callable[..., None] | None = None  # hook()'s step, which finish() calls once more
        self.handles: list[Any] = []  # the pre-hooks that tell another backward call's step runs (_wait)
        self.observed: Any = None  # the observed backward call (its graph task), once its first step came
        nodes, res = record.node_columns, record.residual_columns
        self.first, self.count, self.slot, self.storage = nodes.first, nodes.count, res.slot, res.storage
        st = record.storage_columns
        # a storage the graph lets go of entirely is watched; parameters and outputs are settled in finish()
        self.watched = [not (p or o) for p, o in zip(st.is_parameter, st.is_output)]
        self.live: dict[int, tuple[int, ...]] | None = None  # node -> residuals still held, where some were gone
        self.ids = tuple(range(record.n_residuals))  # node i's residuals: ids[first:first + count], a tuple
        # (with retain_graph the observed call releases nothing; another call a rule or hook starts may)
        status = res.status
        if Status.RELEASED in status:  # some were gone when traced: only the others are held
            self.live = {}
            for i, (first, count) in enumerate(zip(nodes.first, nodes.count)):
                held = tuple([j for j in range(first, first + count) if status[j] is not Status.RELEASED])
                if held:
                    self.live[i] = held
            counted = [self.storage[j] for held in self.live.values() for j in held]
        else:
            counted = self.storage  # every residual is held: each node's are its whole range
        self.unreleased = dict(Counter(counted))
        self.unreleased.pop(None, None)

    @property
    def retained(self) -> bool:
        """Whether the graph is kept (retain_graph)."""
        return self.keep

    def lifetime(self, i: int) -> Lifetime:
        """Residual i's lifetime as observed so far."""
        k = self.record.residual_columns.storage[i]
        return Lifetime(OBSERVED, self.released_at[i], self.freed_at[k] if k is not None else None,
                        None, fixed_note(self.record, i))  # (who holds what backward did not free: once finished)

    def hook(self) -> Callable[..., None]:
        """`step(grad, node=None)`, the engine's pre-hook (internals.PreHook): the engine is about to
        run `node` (asked of the engine when not given), so settle the previous step and record this
        one; `step(None, END)` settles the last. One Python call per step, the settling inline, on
        locals: the last step's node released its values (its rule returned: the engine runs the
        next one of the same backward call after it; read instead, is_released: one raw slot, after
        the last step and where either step is another backward call's: where not released, again
        at each later step, _late) and which watched storages died since (those the graph let go of
        before, then at that step)."""
        index_of, key, on_step, data = self.index_of, self.key, self.on_step, self.trace._data
        order, released, freed, ids = self.order, self.released, self.freed, self.ids
        released_at, freed_at, weaks, pending = self.released_at, self.freed_at, self.weaks, self.pending
        firsts, counts, slots, storages = self.first, self.count, self.slot, self.storage
        unreleased, watched, live, keep = self.unreleased, self.watched, self.live, self.keep
        current, expired = CURRENT_NODE, weak_expired
        add_order, add_released, add_freed = order.append, released.append, freed.append
        last, last_node = -1, None  # the node index (and graph node) of the step recorded last
        # each step's backward call (graph task); where this torch cannot say, a new object a step: all read
        task_of, observed, last_task = GRAPH_TASK or object, None, None
        late: _Late = {}  # the steps read as not released, by backward call: node index -> (step, node, values)
        waiting: dict[int, list[bool]] = {}  # node index -> the done flag of its latest one-shot pre-hook (_wait)
        # the shared hook (a tensor pre-hook, not a pre-hook per node: PreHook), and which call each step is
        shared = key is SEQUENCE_NR and GRAPH_TASK is not None

        def step(_grad: Any, gnode: Any = None) -> None:
            nonlocal last, last_node, observed, last_task
            if gnode is None:
                gnode = current()
                if gnode is None:  # hooks called with no node running: a compiled backward (compiled autograd)
                    raise NotObservableError(_NO_NODE)
            task = None
            if gnode is not END:
                i = index_of(key(gnode))
                if i is None:  # a node outside this trace (cannot happen for the engine's own task)
                    return
                task = task_of()
                if task != observed and observed is not None and shared and _grad is not RUNS:
                    self._wait(waiting, i, gnode)  # another call's: a step once the node runs (_wait)
                    return
            k = len(order) - 1  # the last step, settled here
            if pending:  # storages the graph let go of before: gone now?
                still = []
                for s in pending:
                    if expired(weaks[s]):
                        freed_at[s] = k
                        freed[k] = (*freed[k], s)
                    else:
                        still.append(s)
                pending[:] = still
            if k >= 0 and counts[last] and (not keep or last_task != observed):  # (kept: only another call's)
                if live is None:
                    first = firsts[last]
                    held: tuple[int, ...] | None = ids[first:first + counts[last]]
                else:
                    held = live.get(last)
                if held and released_at[held[0]] is None:  # (not released by another call's run of the node)
                    if task == last_task == observed or is_released(last_node, slots[held[0]]):
                        released[k] = held
                        for j in held:
                            released_at[j] = k
                            s = storages[j]
                            if s is not None:
                                left = unreleased[s] = unreleased[s] - 1
                                if not left and watched[s]:  # the graph let go of it entirely: gone now, or watched
                                    if expired(weaks[s]):
                                        freed_at[s] = k
                                        freed[k] = (*freed[k], s)
                                    else:
                                        pending.append(s)
                    else:  # its rule still running (another call's step came first), or its call keeps the graph
                        for group in late.values():  # (this run of the node, not an earlier one)
                            group.pop(last, None)
                        late.setdefault(last_task, {})[last] = (k, last_node, held)
            if late and (task in late or gnode is END):  # read again: released since?
                self._late(late, task, task == observed, k)
            if gnode is END:
                return
            if observed is None:  # the first step's backward call is the observed one
                observed = self.observed = task
            last, last_node, last_task = i, gnode, task
            add_order(i)
            add_released(_NONE)  # a tuple once something is
            add_freed(_NONE)
            if on_step is not None:
                on_step(Step(data, self, k + 1))

        self._step = step
        return step

    def _wait(self, waiting: dict[int, list[bool]], i: int, gnode: Any) -> None:
        """Another backward call's hook for node i (the shared hook is a tensor pre-hook: a torch.autograd.grad
        whose `inputs` include the node's output calls it and takes the gradient there without running the
        node): a step once a pre-hook of the node tells it runs, in that call. One-shot (an earlier one for the
        node is done); removed in finish(); the step is `self._step` (hook()'s, not held here)."""
        done = waiting.get(i)
        if done is not None:
            done[0] = True
        done = waiting[i] = [False]
        task_of = GRAPH_TASK or object

        def runs(_grads: Any) -> None:
            if done[0] or self._step is None:
                return
            done[0] = True
            if task_of() != self.observed:  # (the observed call's run of the node: its own hook recorded it)
                self._step(RUNS, gnode)

        self.handles.append(gnode.register_prehook(runs))

    def _late(self, late: _Late, task: Any, observed: bool, k: int) -> None:
        """Read again the steps of backward call `task` (all of them after the last step: `task` None) read as
        not released: their node's rule has returned since (the call ran its next step), so its values are
        released at its own step, or its call keeps its graph (dropped: a later run of the node is a step of
        its own). The observed call's are read at each of its steps until released (another thread may run
        its next step while the rule still runs). Their storages seen gone from step k."""
        released_at, weaks, slot = self.released_at, self.weaks, self.slot
        for t in list(late) if task is None else [task] if task in late else []:
            again: dict[int, tuple[int, Any, tuple[int, ...]]] = {}
            for i, (at, node, held) in late.pop(t).items():
                held = tuple([j for j in held if released_at[j] is None])  # (the node run again, and settled since)
                if not held:
                    continue
                if not is_released(node, slot[held[0]]):
                    if observed and task is not None:
                        again[i] = (at, node, held)
                    continue
                self.released[at] = (*self.released[at], *held)
                for j in held:
                    released_at[j] = at
                    s = self.storage[j]
                    if s is None:
                        continue
                    left = self.unreleased[s] = self.unreleased[s] - 1
                    if not left and self.watched[s]:
                        if weak_expired(weaks[s]):
                            self.freed_at[s] = k
                            self.freed[k] = (*self.freed[k], s)
                        else:
                            self.pending.append(s)
            if again:
                late[t] = again

    def finish(self) -> Lifetimes:
        """After backward: settle the last step, say who still holds what was not freed, and
        return the observed lifetimes (each residual's made when first read)."""
        if self.order:
            self._step(None, END)
        self._step = None  # its closure holds the last graph node
        for handle in self.handles:  # (_wait's pre-hooks)
            handle.remove()
        self.handles = []
        last = len(self.order) - 1
        expired, weaks, freed_at = weak_expired, self.weaks, self.freed_at
        late, alive = [], []  # died after the last step; still alive (who holds each: made when read)
        for s in [s for s, at in enumerate(freed_at) if at is None]:
            if not expired(weaks[s]):
                alive.append(s)
            elif last >= 0:  # died after the last step watched
                freed_at[s] = last
                late.append(s)
        if late:
            self.freed[last] = (*self.freed[last], *late)
        # what the kept graph still holds (with retain_graph: what no other backward call released)
        kept = frozenset(s for s, n in self.unreleased.items() if n) if self.keep else frozenset()
        self.live = None  # what backward no longer needs: plain tuples from here on (no list for the collector)
        self.unreleased, self.pending = {}, []
        released, freed = tuple(self.released), tuple(self.freed)
        self.released, self.freed = released, freed  # type: ignore[assignment]
        made = _Lifetimes(self.record, tuple(self.released_at), tuple(freed_at), tuple(alive), kept)
        return Lifetimes(OBSERVED, tuple(self.order), made, released, freed, self.keep, self.error)


class _Lifetimes:
    """The observed Lifetime of every residual, made when first read from the step each was released
    and its storage freed at, and what holds each storage backward did not free (the observer's lists,
    kept as tuples: the observer itself is let go)."""

    __slots__ = ("record", "released_at", "freed_at", "alive", "kept")

    def __init__(self, record: Any, released_at: tuple[int | None, ...], freed_at: tuple[int | None, ...],
                 alive: tuple[int, ...], kept: frozenset[int]) -> None:
        self.record, self.released_at, self.freed_at, self.alive = record, released_at, freed_at, alive
        self.kept = kept  # the storages the kept graph (retain_graph) still holds residuals in

    def __call__(self) -> tuple[Lifetime, ...]:
        storage = self.record.residual_columns.storage
        freed_at, record = self.freed_at, self.record
        held_by = {k: RETAINED if k in self.kept else (storage_holder(record, k) or OUTSIDE) for k in self.alive}
        return tuple([Lifetime(OBSERVED, released, freed_at[k] if k is not None else None,
                               held_by.get(k) if k is not None else None, fixed_note(record, i))
                      for i, (released, k) in enumerate(zip(self.released_at, storage))])


def observe_backward(
    trace: TraceData, live: Live, gradient: Any, retain_graph: bool | None, create_graph: bool,
    on_step: Callable[[Step], None] | None = None,
) -> None:
    """Run torch.autograd.backward on the live outputs, recording the trace's observed lifetimes."""
    if trace._data.observed is not None:
        raise NotObservableError(
            "this trace already observed a backward pass: call tk.trace(...) again on the "
            "outputs to observe another one (after retain_graph=True)."
        )
    outputs = live.tensors()  # GraphReleasedError when the caller let go of them
    keep = create_graph if retain_graph is None else retain_graph
    with gc_paused():  # the observer's step lists (and any walk): many small objects, one collection after
        hooked = live.hooked()  # the hook dict the build registered: no walk, nodes found by sequence number
        if hooked is not None and not any(hooked[0]):  # (in use: another trace of this graph observes a backward)
            (hooks, index_of), graph_nodes, key = hooked, None, SEQUENCE_NR
        else:
            hooks, (graph_nodes, index_of), key = None, live.op_nodes(trace.record), id
        observer = Observer(trace, index_of, keep, on_step, key)
        handle = PreHook(graph_nodes, observer.hook(), hooks)
        del graph_nodes
        trace._observed(None, observer)
        try:
            torch.autograd.backward(outputs, grad_tensors=gradient, retain_graph=keep, create_graph=create_graph)
        except Exception as err:
            observer.error = str(err)
            raise
        finally:
            handle.remove()
            lifetimes = observer.finish()
            trace._observed(lifetimes)
