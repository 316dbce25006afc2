"""The trace model: forward nodes, the residuals they saved, the storages behind them,
and the observed reverse steps. Views read these; only `observe` writes lifetimes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from . import rules
from .storage import StorageKey, drop_weak_ref, format_bytes, weak_expired

if TYPE_CHECKING:
    import graphviz
    import torch

    from .predict import Prediction
    from .render.table import Table


class _Words(str, Enum):
    """An enum whose members are their own words: `str()`, f-strings and `==` use the text."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Status(_Words):
    """Where autograd stands with one saved value."""

    LIVE = "live"  # held, readable by backward
    RELEASED = "released"  # autograd dropped it (backward ran without retain_graph)
    MODIFIED = "modified in place"  # an in-place op changed it after it was saved: backward will refuse
    NOT_SAVED = "not saved"  # the slot exists but the op did not fill it


class HeldIn(_Words):
    """Where a saved value is kept until backward reads it."""

    GRAPH = "graph"  # by the autograd graph itself
    HOST = "host (save_on_cpu)"  # copied to CPU memory by torch.autograd.graph.save_on_cpu
    RECOMPUTED = "recomputed in backward (checkpoint)"  # not kept: torch.utils.checkpoint reruns the forward
    HOOK = "custom saved-tensor hook"  # packed by the user's own saved_tensors_hooks (see Residual.hook)


class Role(_Words):
    """What a value is to autodiff: a leaf that gets a gradient (input or parameter), a
    constant (no gradient), the traced output, or an intermediate made by an op."""

    INPUT = "input leaf"  # a leaf tensor with requires_grad=True that is not a parameter
    PARAMETER = "parameter"  # an nn.Parameter, or a parameter of a module the caller named
    CONSTANT = "constant"  # no gradient flows to it: data, masks, tensors without history
    OUTPUT = "output"  # a tensor passed to trace(): the traced output
    INTERMEDIATE = "intermediate"  # made by an op inside the graph


_LEAF_KINDS = (Role.CONSTANT, Role.INPUT, Role.PARAMETER)


@dataclass(eq=False, slots=True)
class Residual:
    """One tensor PyTorch saved for a reverse rule, and what happened to it."""

    node: Node = field(repr=False)
    slot: str
    shape: tuple[int, ...] | None
    dtype: str | None
    device: str | None
    nbytes: int | None  # visible bytes: the elements this tensor shows
    storage: Storage | None = field(repr=False)
    role: str
    rule: str
    from_node: int | None = None  # the forward node that made the value (its index), if one in the trace did
    from_name: str | None = None  # else the leaf or constant's name (the caller's, or a label like leaf0)
    place: HeldIn = HeldIn.GRAPH  # where the value is kept until backward reads it
    status: Status = Status.LIVE
    version: int | None = None
    error: str | None = field(default=None, repr=False)
    released_at: int | None = None
    freed_at: int | None = None
    held_by: str | None = None
    saved_version: int | None = None  # version counter when saved (known once it changed)
    preview: str | None = None  # the values, for tensors of at most 4 elements (a copy, as text)
    modified_by: tuple[Mutation, ...] = ()  # in-place calls seen under capture
    kind: Role = Role.INTERMEDIATE  # the role of the saved value (`role` says it in words)
    hook: str | None = None  # the unpack hook's qualified name, for HeldIn.HOOK

    @property
    def leaf_source(self) -> str | None:
        """Who made the value when no forward node did: a leaf's or constant's name, else its kind in
        words (`constant`, `parameter`, `input leaf`); None when the maker is a node or unknown."""
        if self.from_node is not None:
            return None
        if self.from_name is not None:
            return self.from_name
        return self.kind.value if self.kind in _LEAF_KINDS else None

    @property
    def producer(self) -> int | str | None:
        """from_node, else leaf_source: the index of the node that made the value, or a leaf's name."""
        return self.from_node if self.from_node is not None else self.leaf_source

    @property
    def held_in(self) -> str:
        """Where the value is kept, in words (a custom hook is named)."""
        return self.place.value if self.hook is None else f"{self.place.value} {self.hook}"

    @property
    def pinned_nbytes(self) -> int | None:
        """Bytes of the whole allocation this residual keeps alive (None if the graph holds none)."""
        return self.storage.nbytes if self.storage is not None else None

    @property
    def label(self) -> str:
        """`#index NodeName.slot`, e.g. `#0 MulBackward0.other`."""
        return f"#{self.node.index} {self.node.name}.{self.slot}"

    def free_point(self) -> str:
        """The lifetime in words: when autograd dropped it and whether its memory went away."""
        if self.place is HeldIn.RECOMPUTED:
            return "not kept: recomputed in backward"
        if self.status is Status.RELEASED and self.released_at is None:
            return "already freed before tracing"
        if self.status is Status.MODIFIED:
            by = ", ".join(str(m) for m in self.modified_by) or "an in-place op"
            return f"modified in place by {by}: saved at version {self.saved_version}, now {self.version}"
        parts = []
        if self.released_at is not None:
            parts.append(f"released after step {self.released_at}")
        if self.freed_at is not None:
            parts.append(f"freed after step {self.freed_at}")
        elif self.held_by:
            parts.append(f"held by {self.held_by}")
        return "; ".join(parts) if parts else "live (backward not run)"


@dataclass(frozen=True, slots=True)
class Mutation:
    """An in-place call seen under capture: it bumped the version counter of a storage."""

    call: str  # e.g. add_
    source: str | None  # file.py:12
    storage: StorageKey
    version: int  # the tensor's version right after the call

    def __str__(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.call}{where} (version -> {self.version})"


@dataclass(eq=False, slots=True)
class Node:
    """One forward operation as autograd recorded it (its backward node)."""

    name: str  # PyTorch's, e.g. MulBackward0
    op: str  # the forward op, e.g. mul
    index: int  # forward order
    source: str | None  # "file.py:12" under capture, else None
    call: str | None  # the Python-level call that created it under capture, e.g. __mul__
    inputs: tuple[int | str, ...]  # producer node index, or a leaf label
    residuals: list[Residual] = field(default_factory=list, repr=False)
    attributes: dict[str, Any] = field(default_factory=dict, repr=False)
    described: bool = True  # whether rules.py explains this node
    needs: tuple[bool, ...] = ()  # per input slot of the backward (next_functions): whether a gradient goes there
    note: str | None = None  # e.g. where a meta trace ran another kernel than a real device would
    module: str | None = None  # under capture: the module whose forward made it, `linear1 (Linear)`

    @property
    def input_nodes(self) -> tuple[int, ...]:
        """The forward nodes feeding this one (their indices), in input order."""
        return tuple(i for i in self.inputs if type(i) is int)

    @property
    def input_leaves(self) -> tuple[str, ...]:
        """The leaves feeding this one (their labels), in input order."""
        return tuple(i for i in self.inputs if type(i) is str)

    def reads(self) -> list[Residual]:
        """The residuals this node's rule reads for the gradients that are needed (all of them
        for an op rules.py does not describe)."""
        if not self.residuals or not self.described:
            return list(self.residuals)
        read = rules.slots_read_for(self.name, self.needs, tuple(r.slot for r in self.residuals))
        return [r for r in self.residuals if r.slot in read]


@dataclass(eq=False, slots=True)
class Storage:
    """One backing allocation that residuals point into, counted once."""

    key: StorageKey
    nbytes: int
    device: str
    residuals: list[Residual] = field(default_factory=list, repr=False)
    names: tuple[str, ...] = ()  # user variables / parameters that point at it
    is_parameter: bool = False
    is_output: bool = False
    leaf_role: Role | None = None  # INPUT or PARAMETER when a leaf that gets a gradient owns it
    weak: int | None = field(default=None, repr=False)  # a weak reference (storage.weak_ref): tells when memory is gone

    def expired(self) -> bool:
        """True once the allocation has really been freed."""
        return self.weak is not None and weak_expired(self.weak)

    def __del__(self, drop: Callable[[int], None] = drop_weak_ref) -> None:  # bound now: safe at shutdown
        if self.weak is not None:
            drop(self.weak)


@dataclass(eq=False, slots=True)
class Step:
    """One reverse rule as the engine ran it."""

    index: int
    node: Node
    released: list[Residual] = field(default_factory=list)
    freed: list[Storage] = field(default_factory=list)

    @property
    def used(self) -> list[Residual]:
        """The residuals the rule read (see Node.reads)."""
        return self.node.reads()


class Trace:
    """The forward/reverse trace of a graph: nodes, residuals, storages, observed steps."""

    def __init__(
        self,
        nodes: list[Node],
        storages: list[Storage],
        outputs: tuple[torch.Tensor, ...],
        graph_nodes: list[Any],
        leaves: dict[str, str],
        captured: bool,
        mutations: list[Mutation] | None = None,
        leaf_roles: dict[str, Role] | None = None,
        output_names: list[str | None] | None = None,
        without_data: str | None = None,
    ) -> None:
        self.nodes = nodes
        self.storages = storages
        self.steps: list[Step] = []
        self.leaves = leaves  # leaf label -> description (role, shape, dtype)
        self.leaf_roles = leaf_roles or {}  # leaf label -> its role
        self.output_names = output_names or []  # the caller's names for the traced outputs
        self.captured = captured
        self.retained: bool | None = None  # after backward: whether the graph was kept
        self.error: str | None = None  # PyTorch's message if the observed backward raised
        self.mutations = mutations or []  # in-place calls seen under capture
        self.without_data = without_data  # "meta" or "fake": shapes and bytes only, no values
        self._outputs = outputs
        self._graph_nodes = graph_nodes

    @property
    def residuals(self) -> list[Residual]:
        """Every saved tensor of every node, in forward order."""
        return [r for n in self.nodes for r in n.residuals]

    @property
    def saved_bytes(self) -> int:
        """Bytes of the distinct storages the graph holds through its residuals."""
        return sum(s.nbytes for s in self.storages)

    @property
    def saved_bytes_by_device(self) -> dict[str, int]:
        """saved_bytes split by where the storages live (offloaded residuals count on the host)."""
        out: dict[str, int] = {}
        for s in self.storages:
            out[s.device] = out.get(s.device, 0) + s.nbytes
        return out

    def graph_owned_storages(self) -> list[Storage]:
        """Storages only the graph holds (not parameters, named user variables or the outputs):
        what dropping the graph gives back."""
        return [s for s in self.storages if not s.is_parameter and not s.names and not s.is_output]

    @property
    def visible_bytes(self) -> int:
        """Sum of the residuals' own element bytes: the naive estimate from shapes."""
        return sum(r.nbytes or 0 for r in self.residuals)

    def backward(
        self,
        gradient: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        on_step: Callable[[Step], None] | None = None,
    ) -> Trace:
        """Run backward on the real graph, recording the reverse order and free points.

        `on_step(step)` is called as each reverse rule is about to run (after the previous
        step's releases and frees were recorded)."""
        from .observe import observe_backward
        from .without_data import refuse_without_data

        refuse_without_data(self)
        observe_backward(self, gradient, retain_graph, create_graph, on_step)
        return self

    def draw(self, max_nodes: int = 60, width: int = 840) -> graphviz.Digraph:
        """The trace as a graphviz drawing laid out for a place `width` px wide, at full size (text
        never scaled down): reverse rules above the forward ops they reverse, residual edges with
        the bytes they pin, a lifetime strip and a legend (long traces fold and collapse)."""
        from .render.dot import trace_graph

        return trace_graph(self, max_nodes=max_nodes, width=width)

    def svg(self, max_nodes: int = 60, width: int = 840) -> str:
        """The drawing rendered to SVG (system `dot` if present, else the bundled renderer)."""
        from .render.svg import render_svg

        return render_svg(self.draw(max_nodes=max_nodes, width=width).source)

    def table(self, sort: str = "forward", top: int | None = None) -> Table:
        """The residuals as a table (HTML in Jupyter, text in a terminal). `sort="bytes"`: most
        bytes only the graph keeps first (`"pinned"`: most bytes pinned); `top`: that many rows."""
        from .render.table import residual_table

        return residual_table(self, sort, top)

    def by_module(self) -> Table:
        """Residuals per module of the captured model: how many, the bytes only the graph keeps
        for them, what else they pin, and the steps that free them (observed, else predicted)."""
        from .render.table import module_table

        return module_table(self, None if self.steps else self.predict_backward())

    def text(self) -> str:
        """Plain text with the same facts as the drawing."""
        from .render.table import trace_text

        return trace_text(self)

    def summary(self) -> str:
        """One line: nodes, residuals, storages and bytes."""
        return (
            f"{len(self.nodes)} forward ops, {len(self.residuals)} residuals in "
            f"{len(self.storages)} storages: pinned {format_bytes(self.saved_bytes)}, "
            f"visible {format_bytes(self.visible_bytes)}"
        ) + (f" ({self.without_data} tensors: predicted from shapes, no values)" if self.without_data else "")

    def timeline(self) -> Any:
        """A matplotlib figure: bytes the residuals keep alive as each reverse step starts, stacked
        by residual (the largest named), predicted and (after backward) observed, the peak marked."""
        from .timeline import timeline_figure

        return timeline_figure(self)

    def predict_backward(self, retain_graph: bool = False) -> Prediction:
        """The reverse order and free points predicted from the graph's structure (no backward run)."""
        from .predict import predict_backward

        return predict_backward(self, retain_graph)

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from .render.dot import WIDTH
        from .render.svg import scrolling_html

        bundle = {"text/plain": self.text()}
        try:
            bundle["image/svg+xml"] = svg = self.svg()
            wide = scrolling_html(svg, WIDTH)  # wider than a cell: full size in a box that scrolls sideways
            if wide is not None:
                bundle["text/html"] = wide
        except Exception as err:  # a drawing problem must never hide the facts
            bundle["text/plain"] += f"\n(drawing unavailable: {err})"
        return bundle
