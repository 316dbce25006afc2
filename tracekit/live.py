"""The live handle: what backward needs from the real graph, held so that it is no holder.

The handle keeps weak references to the traced outputs (an autograd node cannot be weakly
referenced, and the outputs lead to every node); the saved storages are watched through bare
weak references that the trace's data owns (reader._Data). Holding a trace therefore keeps nothing
alive: once the caller lets go of the outputs, the graph and its saved values are freed as in
plain PyTorch, and `graph_nodes` / `tensors` raise GraphReleasedError."""

from __future__ import annotations

import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

from .errors import GraphReleasedError, NotObservableError
from .internals import sequence_nr

if TYPE_CHECKING:
    import torch

    from .rows import Record


def is_leaf_node(node: Any) -> bool:
    """True for an AccumulateGrad node: the end of the graph at a leaf that gets a gradient."""
    return hasattr(node, "variable")


def walk(roots: list[Any]) -> list[Any]:
    """Every backward node reachable from roots (iterative: any depth)."""
    seen: set[Any] = set()
    order: list[Any] = []
    todo = deque(roots)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        todo.extend(n for n, _ in node.next_functions if n is not None and n not in seen)
    return order


def forward_order(everything: list[Any]) -> list[Any]:
    """The graph's op nodes (no leaves) in forward order: by sequence number."""
    return sorted((n for n in everything if not is_leaf_node(n)), key=sequence_nr)


class Live:
    """Weak references to the traced outputs."""

    __slots__ = ("outputs",)

    def __init__(self, outputs: tuple[torch.Tensor, ...]) -> None:
        self.outputs = tuple(weakref.ref(t) for t in outputs)

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
        if len(nodes) != len(record.nodes) or any(g.name() != n.name for g, n in zip(nodes, record.nodes)):
            raise NotObservableError(
                "the graph behind the traced outputs changed since it was traced: trace it again.")
        return nodes
