"""The trace model. The record (`Record`: rows of plain data, no tensor, node or graph inside;
picklable, JSON through trace_format.py) is what a trace knows; `Node`, `Residual`, `Storage`
and `Step` are views made when read (each holds the record, never the other way round, so a
trace has no reference cycle); `Trace` pairs the record with the live handle (live.py: only
what backward needs, held weakly) and the observed lifetimes (lifetimes.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from . import rules
from .lifetimes import Lifetime, Lifetimes
from .storage import StorageKey, drop_weak_ref, format_bytes, weak_expired

if TYPE_CHECKING:
    import graphviz
    import torch

    from .live import Live
    from .predict import Prediction
    from .render.table import Table

FORMAT_VERSION = 1  # of the record's rows and of trace_format.py's JSON (docs/trace-format.md)


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
    CHECKPOINT = "kept by checkpoint to recompute"  # a checkpointed region's input, kept to rerun its forward
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


@dataclass(frozen=True, slots=True)
class CachedValue:
    """An op output a selective-checkpoint policy keeps in the checkpoint's cache (not in the graph)."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int  # the whole storage
    key: StorageKey  # storage key (counted once)


class NodeRow(NamedTuple):
    """One forward operation as autograd recorded it (its backward node): plain data."""

    name: str  # PyTorch's, e.g. MulBackward0
    op: str  # the forward op, e.g. mul
    source: str | None  # "file.py:12" under capture, else None
    call: str | None  # the Python-level call that created it under capture, e.g. __mul__
    inputs: tuple[int | str, ...]  # producer node index, or a leaf label, in input order
    first: int  # its residuals are residual rows first .. first + count - 1
    count: int
    attributes: tuple[tuple[str, Any], ...]  # non-tensor saved values (plain: numbers, text, tuples)
    described: bool  # whether rules.py explains this node
    needs: tuple[bool, ...]  # per input slot of the backward: whether a gradient goes there
    note: str | None  # e.g. where a meta trace ran another kernel than a real device would
    module: str | None = None  # under capture: the module whose forward made it, `linear1 (Linear)`


class ResidualRow(NamedTuple):
    """One tensor PyTorch saved for a reverse rule, as it was when traced: plain data."""

    node: int  # the index of the node that saved it
    slot: str
    shape: tuple[int, ...] | None
    dtype: str | None
    device: str | None
    nbytes: int | None  # visible bytes: the elements this tensor shows
    storage: int | None  # the index of its storage row
    role: str
    rule: str
    from_node: int | None  # the forward node that made the value (its index), if one in the trace did
    from_name: str | None  # else the leaf or constant's name (the caller's, or a label like leaf0)
    place: HeldIn
    status: Status  # when traced
    version: int | None
    error: str | None
    saved_version: int | None  # version counter when saved (known once it changed)
    preview: str | None  # the values, for tensors of at most 4 elements (as text)
    modified_by: tuple[Mutation, ...]  # in-place calls seen under capture
    kind: Role
    hook: str | None  # the unpack hook's qualified name, for HeldIn.HOOK


class StorageRow(NamedTuple):
    """One backing allocation that residuals point into, counted once: plain data."""

    key: StorageKey
    nbytes: int
    device: str
    residuals: tuple[int, ...]  # residual rows in it
    names: tuple[str, ...]  # user variables / parameters that point at it
    is_parameter: bool
    is_output: bool
    leaf_role: Role | None  # INPUT or PARAMETER when a leaf that gets a gradient owns it


@dataclass(frozen=True, slots=True)
class Record:
    """Everything a trace knows, as plain immutable data (see docs/trace-format.md)."""

    nodes: tuple[NodeRow, ...]
    residuals: tuple[ResidualRow, ...]
    storages: tuple[StorageRow, ...]
    leaves: tuple[tuple[str, str], ...]  # leaf label -> description (role, shape, dtype)
    leaf_roles: tuple[tuple[str, Role], ...]
    outputs: tuple[tuple[int | None, str | None], ...]  # per traced output: its node, the caller's name
    captured: bool
    mutations: tuple[Mutation, ...]
    without_data: str | None  # "meta" or "fake": shapes and bytes only, no values
    cache: tuple[CachedValue, ...] = ()  # what a selective-checkpoint policy keeps (diff.py)
    version: int = FORMAT_VERSION


class _Data:
    """What views read: the record, the observed lifetimes (or the observer while backward runs),
    the cached prediction, the storages' weak references (dropped when the last view goes).
    Never holds a view."""

    __slots__ = ("record", "observed", "observing", "predicted", "weaks", "__weakref__")

    def __init__(self, record: Record, observed: Lifetimes | None, weaks: tuple[int, ...] | None) -> None:
        self.record = record
        self.observed = observed
        self.observing: Any = None  # observe.Observer while backward runs: its lifetimes so far
        self.predicted: Lifetimes | None = None
        self.weaks = weaks  # one bare weak reference per storage (storage.weak_ref), owned here

    def __del__(self, drop: Callable[[int], None] = drop_weak_ref) -> None:  # bound now: safe at shutdown
        for ref in self.weaks or ():
            drop(ref)

    def watched(self) -> Any:
        """The observed lifetimes, or the observer's so far, or None."""
        return self.observed if self.observed is not None else self.observing

    def observed_lifetime(self, i: int) -> Lifetime | None:
        """Residual i's observed lifetime (so far, while backward runs), None before backward."""
        if self.observed is not None:
            return self.observed.residuals[i]
        if self.observing is not None:
            return self.observing.lifetime(i)
        return None

    def lifetimes(self) -> Lifetimes:
        """The observed lifetimes once backward ran, else the prediction."""
        return self.observed if self.observed is not None else self.prediction()

    def prediction(self) -> Lifetimes:
        """The lifetimes predicted from the record (computed once; backward does not change them)."""
        if self.predicted is None:
            from .predict import predict_lifetimes

            self.predicted = predict_lifetimes(self.record)
        return self.predicted


def _field(k: int, doc: str) -> property:
    return property(lambda self: self._row[k], doc=doc)


class _View:
    __slots__ = ("_d", "_i", "_row")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._i == self._i and other._d is self._d  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._i)

    @property
    def index(self) -> int:
        """Its position in the trace (forward order for nodes)."""
        return self._i


class Node(_View):
    """A view of one forward operation (its backward node)."""

    __slots__ = ()

    def __init__(self, d: _Data, i: int) -> None:
        self._d, self._i, self._row = d, i, d.record.nodes[i]

    name = _field(0, "PyTorch's name, e.g. MulBackward0")
    op = _field(1, "the forward op, e.g. mul")
    source = _field(2, '"file.py:12" under capture, else None')
    call = _field(3, "the Python-level call that created it under capture, e.g. __mul__")
    inputs = _field(4, "producer node index, or a leaf label, in input order")
    described = _field(8, "whether rules.py explains this node")
    needs = _field(9, "per input slot of the backward: whether a gradient goes there")
    note = _field(10, "where a trace without data ran another kernel than a real device would")
    module = _field(11, "under capture: the module whose forward made it, e.g. `linear1 (Linear)`")

    @property
    def attributes(self) -> dict[str, Any]:
        """Non-tensor values the node saved (sizes, dims, scalars): shown, never counted as memory."""
        return dict(self._row[7])

    @property
    def residuals(self) -> list[Residual]:
        """The tensors this node saved, in slot order."""
        d, row = self._d, self._row
        return [Residual(d, j) for j in range(row[5], row[5] + row[6])]

    @property
    def input_nodes(self) -> tuple[int, ...]:
        """The forward nodes feeding this one (their indices), in input order."""
        return tuple(i for i in self._row[4] if type(i) is int)

    @property
    def input_leaves(self) -> tuple[str, ...]:
        """The leaves feeding this one (their labels), in input order."""
        return tuple(i for i in self._row[4] if type(i) is str)

    def reads(self) -> list[Residual]:
        """The residuals this node's rule reads for the gradients that are needed (all of them
        for an op rules.py does not describe)."""
        residuals = self.residuals
        if not residuals or not self._row[8]:
            return residuals
        read = rules.slots_read_for(self._row[0], self._row[9], tuple(r.slot for r in residuals))
        return [r for r in residuals if r.slot in read]

    def __repr__(self) -> str:
        return f"Node(#{self._i} {self._row[0]})"


class Residual(_View):
    """A view of one tensor PyTorch saved for a reverse rule, and what happened to it."""

    __slots__ = ()

    def __init__(self, d: _Data, i: int) -> None:
        self._d, self._i, self._row = d, i, d.record.residuals[i]

    slot = _field(1, "the slot name PyTorch uses, e.g. self, other, result")
    shape = _field(2, "the saved tensor's shape (None when not held)")
    dtype = _field(3, "e.g. float32")
    device = _field(4, "e.g. cpu, cuda:0")
    nbytes = _field(5, "visible bytes: the elements this tensor shows")
    role = _field(7, "the role in words")
    rule = _field(8, "the formulas that read it")
    from_node = _field(9, "the forward node that made the value (its index), if one in the trace did")
    from_name = _field(10, "else the leaf or constant's name")
    place = _field(11, "where the value is kept until backward reads it")
    version = _field(13, "the version counter (now, for a value modified in place)")
    error = _field(14, "PyTorch's message when reading it failed")
    saved_version = _field(15, "version counter when saved (known once it changed)")
    preview = _field(16, "the values, for tensors of at most 4 elements (as text)")
    modified_by = _field(17, "in-place calls seen under capture")
    kind = _field(18, "the role of the saved value")
    hook = _field(19, "the unpack hook's qualified name, for HeldIn.HOOK")

    @property
    def node(self) -> Node:
        """The node that saved it."""
        return Node(self._d, self._row[0])

    @property
    def storage(self) -> Storage | None:
        """The allocation it points into (None when not held)."""
        k = self._row[6]
        return None if k is None else Storage(self._d, k)

    @property
    def status(self) -> Status:
        """Where autograd stands with it: as traced, RELEASED once an observed backward released it."""
        lt = self._d.observed_lifetime(self._i)
        return Status.RELEASED if lt is not None and lt.released_at is not None else self._row[12]

    @property
    def lifetime(self) -> Lifetime:
        """Its lifetime: observed once backward ran, else predicted (lifetimes.py)."""
        return self._d.lifetimes().residuals[self._i]

    @property
    def released_at(self) -> int | None:
        """The observed step after which autograd released it (None before backward)."""
        lt = self._d.observed_lifetime(self._i)
        return None if lt is None else lt.released_at

    @property
    def freed_at(self) -> int | None:
        """The observed step after which its memory was gone (None before backward or if held)."""
        lt = self._d.observed_lifetime(self._i)
        return None if lt is None else lt.freed_at

    @property
    def held_by(self) -> str | None:
        """What still held its memory after the observed backward (None: freed, or not run)."""
        lt = self._d.observed_lifetime(self._i)
        return None if lt is None else lt.held_by

    def free_point(self) -> str:
        """The lifetime in words (observed, else predicted)."""
        return self.lifetime.words()

    @property
    def leaf_source(self) -> str | None:
        """Who made the value when no forward node did: a leaf's or constant's name, else its kind in
        words (`constant`, `parameter`, `input leaf`); None when the maker is a node or unknown."""
        row = self._row
        if row[9] is not None:
            return None
        if row[10] is not None:
            return row[10]
        return row[18].value if row[18] in _LEAF_KINDS else None

    @property
    def producer(self) -> int | str | None:
        """from_node, else leaf_source: the index of the node that made the value, or a leaf's name."""
        return self._row[9] if self._row[9] is not None else self.leaf_source

    @property
    def held_in(self) -> str:
        """Where the value is kept, in words (a custom hook is named)."""
        place, hook = self._row[11], self._row[19]
        return place.value if hook is None else f"{place.value} {hook}"

    @property
    def pinned_nbytes(self) -> int | None:
        """Bytes of the whole allocation this residual keeps alive (None if the graph holds none)."""
        k = self._row[6]
        return None if k is None else self._d.record.storages[k][1]

    @property
    def label(self) -> str:
        """`#index NodeName.slot`, e.g. `#0 MulBackward0.other`."""
        node = self._row[0]
        return f"#{node} {self._d.record.nodes[node][0]}.{self._row[1]}"

    def __repr__(self) -> str:
        return f"Residual({self.label}, {self.shape}, {self.dtype})"


class Storage(_View):
    """A view of one backing allocation that residuals point into, counted once."""

    __slots__ = ()

    def __init__(self, d: _Data, i: int) -> None:
        self._d, self._i, self._row = d, i, d.record.storages[i]

    key = _field(0, "device and base address (the storage object's identity without data)")
    nbytes = _field(1, "bytes of the whole allocation")
    device = _field(2, "where it lives")
    names = _field(4, "user variables / parameters that point at it")
    is_parameter = _field(5, "whether a parameter or a leaf that gets a gradient owns it")
    is_output = _field(6, "whether a traced output lives in it")
    leaf_role = _field(7, "INPUT or PARAMETER when a leaf that gets a gradient owns it")

    @property
    def residuals(self) -> list[Residual]:
        """The residuals that point into it."""
        d = self._d
        return [Residual(d, j) for j in self._row[3]]

    def expired(self) -> bool:
        """True once the allocation has really been freed (False for a loaded trace: not known)."""
        weaks = self._d.weaks
        return weaks is not None and weak_expired(weaks[self._i])

    def __repr__(self) -> str:
        return f"Storage({self.device}, {format_bytes(self.nbytes)})"


class Step(_View):
    """A view of one reverse rule as the engine ran it (or as predicted)."""

    __slots__ = ("_lt",)

    def __init__(self, d: _Data, lifetimes: Any, k: int) -> None:
        self._d, self._i, self._lt = d, k, lifetimes
        self._row = lifetimes.order[k]

    @property
    def node(self) -> Node:
        """The node whose rule ran."""
        return Node(self._d, self._row)

    @property
    def released(self) -> list[Residual]:
        """The residuals autograd released after this rule ran."""
        return [Residual(self._d, j) for j in self._lt.released[self._i]]

    @property
    def freed(self) -> list[Storage]:
        """The storages whose memory was gone after this rule ran."""
        return [Storage(self._d, j) for j in self._lt.freed[self._i]]

    @property
    def used(self) -> list[Residual]:
        """The residuals the rule read (see Node.reads)."""
        return self.node.reads()

    def __repr__(self) -> str:
        return f"Step({self._i}, {self.node!r})"


class Trace:
    """The forward/reverse trace of a graph: the record (nodes, residuals, storages), its
    lifetimes (predicted, and observed once backward ran) and a live handle on the graph that
    is no holder: it keeps nothing alive that the caller let go of."""

    def __init__(self, record: Record, live: Live | None = None, observed: Lifetimes | None = None,
                 weaks: tuple[int, ...] | None = None) -> None:
        self._data = _Data(record, observed, weaks)
        self._live = live
        self._views: dict[str, list[Any]] = {}

    @classmethod
    def _restore(cls, record: Record, observed: Lifetimes | None) -> Trace:
        return cls(record, None, observed)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Trace._restore, (self.record, self._data.observed))

    def _cached(self, what: str, make: Callable[[], list[Any]]) -> list[Any]:
        views = self._views.get(what)
        if views is None:
            views = self._views[what] = make()
        return views

    @property
    def record(self) -> Record:
        """What the trace knows, as plain immutable data."""
        return self._data.record

    @property
    def nodes(self) -> list[Node]:
        """The forward ops, in forward order."""
        d = self._data
        return self._cached("nodes", lambda: [Node(d, i) for i in range(len(d.record.nodes))])

    @property
    def residuals(self) -> list[Residual]:
        """Every saved tensor of every node, in forward order."""
        d = self._data
        return self._cached("residuals", lambda: [Residual(d, i) for i in range(len(d.record.residuals))])

    @property
    def storages(self) -> list[Storage]:
        """The distinct allocations residuals point into."""
        d = self._data
        return self._cached("storages", lambda: [Storage(d, i) for i in range(len(d.record.storages))])

    @property
    def steps(self) -> list[Step]:
        """The observed reverse steps (empty before backward)."""
        d = self._data
        if d.observed is not None:
            return self._cached("steps", lambda: [Step(d, d.observed, k) for k in range(len(d.observed.order))])
        if d.observing is not None:
            return [Step(d, d.observing, k) for k in range(len(d.observing.order))]
        return []

    def lifetimes(self) -> Lifetimes:
        """Every residual's lifetime: observed once backward ran, else predicted from the structure."""
        return self._data.lifetimes()

    @property
    def leaves(self) -> dict[str, str]:
        """Leaf label -> description (role, shape, dtype)."""
        return dict(self.record.leaves)

    @property
    def leaf_roles(self) -> dict[str, Role]:
        """Leaf label -> its role."""
        return dict(self.record.leaf_roles)

    @property
    def output_names(self) -> list[str | None]:
        """The caller's names for the traced outputs."""
        return [name for _, name in self.record.outputs]

    @property
    def captured(self) -> bool:
        """Whether the forward ran under tk.capture() (source lines known)."""
        return self.record.captured

    @property
    def mutations(self) -> list[Mutation]:
        """In-place calls seen under capture."""
        return list(self.record.mutations)

    @property
    def without_data(self) -> str | None:
        """"meta" or "fake": shapes and bytes only, no values."""
        return self.record.without_data

    @property
    def retained(self) -> bool | None:
        """After backward: whether the graph was kept (None before)."""
        watched = self._data.watched()
        return None if watched is None else watched.retained

    @property
    def error(self) -> str | None:
        """PyTorch's message if the observed backward raised."""
        watched = self._data.watched()
        return None if watched is None else watched.error

    @property
    def _outputs(self) -> tuple[torch.Tensor, ...]:
        """The traced outputs, while the caller holds them (GraphReleasedError once let go)."""
        return self._handle().tensors()

    @property
    def _graph_nodes(self) -> list[Any]:
        """The graph's nodes in forward order, walked again from the live outputs."""
        return self._handle().graph_nodes(self.record)

    def _handle(self) -> Live:
        from .errors import GraphReleasedError

        if self._live is None:
            raise GraphReleasedError(
                "this trace was loaded from a file (or unpickled): it is a record without a graph, so "
                "it cannot run backward. Trace the program again to observe a backward pass.")
        return self._live

    @property
    def saved_bytes(self) -> int:
        """Bytes of the distinct storages the graph holds through its residuals."""
        return sum(s[1] for s in self.record.storages)

    @property
    def saved_bytes_by_device(self) -> dict[str, int]:
        """saved_bytes split by where the storages live (offloaded residuals count on the host)."""
        out: dict[str, int] = {}
        for s in self.record.storages:
            out[s[2]] = out.get(s[2], 0) + s[1]
        return out

    def graph_owned_storages(self) -> list[Storage]:
        """Storages only the graph holds (not parameters, named user variables or the outputs):
        what dropping the graph gives back."""
        return [s for s in self.storages if not s.is_parameter and not s.names and not s.is_output]

    @property
    def visible_bytes(self) -> int:
        """Sum of the residuals' own element bytes: the naive estimate from shapes."""
        return sum(r[5] or 0 for r in self.record.residuals)

    def backward(
        self,
        gradient: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        on_step: Callable[[Step], None] | None = None,
    ) -> Trace:
        """Run backward on the real graph, recording the reverse order and free points.

        `on_step(step)` is called as each reverse rule is about to run (after the previous
        step's releases and frees were recorded). Raises GraphReleasedError when the caller
        no longer holds the traced outputs (the graph is gone, as in plain PyTorch)."""
        from .observe import observe_backward
        from .without_data import refuse_without_data

        refuse_without_data(self)
        observe_backward(self, gradient, retain_graph, create_graph, on_step)
        return self

    def _observed(self, lifetimes: Lifetimes | None, observer: Any = None) -> None:
        """observe.py's one write: the observer while backward runs, then the observed lifetimes."""
        self._data.observing = observer
        self._data.observed = lifetimes
        self._views.pop("steps", None)

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

        return module_table(self)

    def text(self) -> str:
        """Plain text with the same facts as the drawing."""
        from .render.table import trace_text

        return trace_text(self)

    def to_json(self, path: str | None = None) -> str:
        """The record (and the observed lifetimes, if any) as versioned JSON (docs/trace-format.md);
        written to `path` when given. tk.load_trace reads it back."""
        from .trace_format import dump

        return dump(self, path)

    def summary(self) -> str:
        """One line: nodes, residuals, storages and bytes."""
        rec = self.record
        return (
            f"{len(rec.nodes)} forward ops, {len(rec.residuals)} residuals in "
            f"{len(rec.storages)} storages: pinned {format_bytes(self.saved_bytes)}, "
            f"visible {format_bytes(self.visible_bytes)}"
        ) + (f" ({self.without_data} tensors: predicted from shapes, no values)" if self.without_data else "")

    def timeline(self) -> Any:
        """A matplotlib figure: bytes the residuals keep alive as each reverse step starts, stacked
        by residual (the largest named), predicted and (after backward) observed, the peak marked."""
        from .timeline import timeline_figure

        return timeline_figure(self)

    def predict_backward(self, retain_graph: bool = False) -> Prediction:
        """The reverse order and free points predicted from the graph's structure (no backward run;
        the same before and after one)."""
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
