"""The live handle: what backward needs from the real graph, held so that it is no holder.

The handle keeps weak references to the traced outputs (an autograd node cannot be weakly
referenced, and the outputs lead to every node); the saved storages are watched through bare
weak references that the trace's data owns (reader._Data). Holding a trace therefore keeps nothing
the caller holds alive: once the caller lets go of the outputs, the graph and its saved values are
freed as in plain PyTorch, and `graph_nodes` / `tensors` raise GraphReleasedError. An output
nobody held when it was traced (`tk.trace(f(x)).backward()`) is the one exception: the trace is
the only way to that graph, so it keeps that output (and its graph) until the trace goes."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import GraphReleasedError, NotObservableError
from .internals import SEQUENCE_NR, HookDicts

if TYPE_CHECKING:
    import torch

    from .rows import Record


def is_leaf_node(node: Any) -> bool:
    """True for an AccumulateGrad node: the end of the graph at a leaf that gets a gradient. Asked of
    the node's type (AccumulateGrad's `variable` getter), not the node: a custom Function's node is
    its `ctx`, on which a forward may set any attribute (`ctx.variable = ...` makes no leaf)."""
    return hasattr(node, "variable") and hasattr(type(node), "variable")  # the first: a cheap miss for op nodes


def is_leaf_node_type(kind: type) -> bool:
    """is_leaf_node for every node of a type: the answer is its type's."""
    return hasattr(kind, "variable")


def walk(roots: list[Any], edges: dict[Any, tuple[tuple[Any, int], ...]] | None = None) -> list[Any]:
    """Every backward node reachable from roots (iterative: any depth), depth first; `edges`, when
    given, gets each node's next_functions (read once here: each read makes a new tuple)."""
    seen: set[Any] = set()
    order: list[Any] = []
    todo = list(roots)
    pop, push, add, keep = todo.pop, todo.append, seen.add, order.append
    while todo:
        node = pop()
        if node in seen:
            continue
        add(node)
        keep(node)
        nexts = node.next_functions
        if edges is not None:
            edges[node] = nexts
        for n, _ in nexts:
            if n is not None and n not in seen:
                push(n)
    return order


def _roots(outputs: tuple[torch.Tensor, ...]) -> tuple[tuple[int, str] | None, ...]:
    """Each output's node as (its sequence number, its name); None for an output without one."""
    return tuple((SEQUENCE_NR(t.grad_fn), t.grad_fn.name()) if t.grad_fn is not None else None for t in outputs)


def forward_order(everything: list[Any]) -> list[Any]:
    """The graph's op nodes (no leaves) in forward order: by sequence number."""
    return sorted([n for n in everything if not (hasattr(n, "variable") and hasattr(type(n), "variable"))],
                  key=SEQUENCE_NR)  # not is_leaf_node(n), inline


class Live:
    """Weak references to the traced outputs, and each node's index by its sequence number (from
    the build: no re-walk in forward order to find a node's row); the outputs nobody else held
    when traced (`tk.trace(f(x))`), kept: the trace is the only way to their graph. `hooks`: the
    empty hook dicts the build found or registered on its nodes (internals.shared_hook_dict), so an
    observed backward needs no walk: the outputs' nodes still being the traced ones (`roots`:
    their sequence numbers and names) says the graph is the traced one (its nodes never change)."""

    __slots__ = ("outputs", "_seq", "_index_by_seq", "kept", "hooks", "roots")

    def __init__(self, outputs: tuple[torch.Tensor, ...], seq: list[int] | None = None,
                 kept: tuple[bool, ...] = (), hooks: HookDicts | None = None) -> None:
        self.outputs = tuple(weakref.ref(t) for t in outputs)
        self._seq = seq  # the nodes' sequence numbers in forward order, no two alike (None: unknown)
        self._index_by_seq: dict[int, int] | None = None
        self.kept = tuple(t for t, keep in zip(outputs, kept) if keep)
        # held weakly: a dict goes with the last node it hooks (and the build's record of it with it)
        self.hooks = None if hooks is None else tuple(map(weakref.ref, hooks))
        self.roots = _roots(outputs)

    @property
    def index_by_seq(self) -> dict[int, int] | None:
        """Each node's index by its sequence number (made when first asked: a trace never observed needs none)."""
        if self._index_by_seq is None and self._seq is not None:
            self._index_by_seq, self._seq = dict(zip(self._seq, range(len(self._seq)))), None
        return self._index_by_seq

    @index_by_seq.setter
    def index_by_seq(self, index: dict[int, int] | None) -> None:
        self._index_by_seq, self._seq = index, None

    def hooked(self) -> tuple[HookDicts, Callable[[int], int | None]] | None:
        """(the hook dicts registered at build, a node's sequence number -> its index in the record)
        when the graph is the traced one and the build registered the dict; None: walk it again
        (op_nodes). The outputs' nodes are read from the live outputs (GraphReleasedError when the
        caller let go of them)."""
        if self.hooks is None or self.index_by_seq is None:
            return None
        if _roots(self.tensors()) != self.roots:  # e.g. an in-place op on an output: a new node above
            raise NotObservableError(
                "the graph behind the traced outputs changed since it was traced: trace it again.")
        hooks = tuple(ref() for ref in self.hooks)
        if any(d is None for d in hooks):  # (a graph whose nodes went: walked again, which says so)
            return None
        return hooks, self.index_by_seq.get  # type: ignore[return-value]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The traced outputs (GraphReleasedError if the caller let go of one)."""
        out = tuple(ref() for ref in self.outputs)
        if any(t is None for t in out):
            raise GraphReleasedError(
                "the traced output is gone: nothing held it after tk.trace(...) (or you deleted it), so "
                "PyTorch freed its graph and saved values, and this trace is a record only. Keep the "
                "output in a variable (y = f(x); tr = tk.trace(y)) to run tr.backward().")
        return out  # type: ignore[return-value]

    def graph_nodes(self, record: Record) -> list[Any]:
        """The graph's op nodes in the record's forward order, walked again from the outputs."""
        nodes = forward_order(walk([t.grad_fn for t in self.tensors()]))
        names = record.node_columns.name
        if len(nodes) != len(names) or any(g.name() != n for g, n in zip(nodes, names)):
            raise NotObservableError(
                "the graph behind the traced outputs changed since it was traced: trace it again.")
        return nodes

    def op_nodes(self, record: Record) -> tuple[list[Any], Callable[[int], int | None]]:
        """The graph's op nodes (in no particular order) and the function from a node's id (the nodes
        are alive while backward runs) to its index in the record, walked again from the outputs
        (NotObservableError if the graph changed)."""
        nodes = [n for n in walk([t.grad_fn for t in self.tensors()]) if not is_leaf_node(n)]  # op nodes
        index_by_seq = self.index_by_seq
        if index_by_seq is None or len(index_by_seq) != len(nodes):  # no map (or one seq twice): forward order
            ordered = self.graph_nodes(record)
            return ordered, dict(zip(map(id, ordered), range(len(ordered)))).get
        # each node's row, found by its sequence number once (the engine hands back the same node objects)
        position = dict(zip(map(id, nodes), map(index_by_seq.get, map(SEQUENCE_NR, nodes))))
        if len(nodes) != record.n_nodes or None in position.values():
            raise NotObservableError(
                "the graph behind the traced outputs changed since it was traced: trace it again.")
        return nodes, position.get
