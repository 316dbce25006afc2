"""Reading the record: `Node`, `Residual`, `Storage` and `Step` are views made when read (each
holds the trace's data, never the other way round, so a trace has no reference cycle), and
`TraceData` is what every view reads: the record, its lifetimes (observed once backward ran,
else predicted) and the views over its rows. `Trace` (trace.py) is a `TraceData` with the
live handle and the methods that hand it to the views."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from . import rules
from .lifetimes import Lifetime, Lifetimes
from .predict import predict_lifetimes
from .rows import LEAF_KINDS, Mutation, Record, Role, Status
from .storage import drop_weak_ref, format_bytes, weak_expired


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

    def __del__(self, drop: Callable[[int], None] = drop_weak_ref, run: Any = deque) -> None:  # bound now: safe
        run(map(drop, self.weaks or ()), 0)  # at shutdown (a deque of length 0: the map run in C, nothing kept)

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
            self.predicted = predict_lifetimes(self.record)
        return self.predicted


def _field(name: str, doc: str) -> property:
    """A property that reads the field `name` of the view's row (from its column)."""
    get = attrgetter(name)
    return property(lambda self: get(self._c)[self._i], doc=doc)


class _View:
    __slots__ = ("_d", "_i", "_c")

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
        self._d, self._i, self._c = d, i, d.record.node_columns

    name = _field("name", "PyTorch's name, e.g. MulBackward0")
    op = _field("op", "the forward op, e.g. mul")
    source = _field("source", '"file.py:12" under capture, else None')
    call = _field("call", "the Python-level call that created it under capture, e.g. __mul__")
    inputs = _field("inputs", "producer node index, or a leaf label, in input order")
    described = _field("described", "whether rules.py explains this node")
    needs = _field("needs", "per input slot of the backward: whether a gradient goes there")
    note = _field("note", "where a trace without data ran another kernel than a real device would")
    module = _field("module", "under capture: the module whose forward made it, e.g. `linear1 (Linear)`")

    @property
    def attributes(self) -> dict[str, Any]:
        """Non-tensor values the node saved (sizes, dims, scalars): shown, never counted as memory."""
        return dict(self._c.attributes[self._i])

    @property
    def residuals(self) -> list[Residual]:
        """The tensors this node saved, in slot order."""
        d, c, i = self._d, self._c, self._i
        first = c.first[i]
        return [Residual(d, j) for j in range(first, first + c.count[i])]

    @property
    def input_nodes(self) -> tuple[int, ...]:
        """The forward nodes feeding this one (their indices), in input order."""
        return tuple(i for i in self._c.inputs[self._i] if type(i) is int)

    @property
    def input_leaves(self) -> tuple[str, ...]:
        """The leaves feeding this one (their labels), in input order."""
        return tuple(i for i in self._c.inputs[self._i] if type(i) is str)

    def reads(self) -> list[Residual]:
        """The residuals this node's rule reads for the gradients that are needed (all of them
        for an op rules.py does not describe)."""
        residuals = self.residuals
        if not residuals or not self._c.described[self._i]:
            return residuals
        read = rules.slots_read_for(self._c.name[self._i], self._c.needs[self._i], tuple(r.slot for r in residuals))
        return [r for r in residuals if r.slot in read]

    def __repr__(self) -> str:
        return f"Node(#{self._i} {self._c.name[self._i]})"


class Residual(_View):
    """A view of one tensor PyTorch saved for a reverse rule, and what happened to it."""

    __slots__ = ()

    def __init__(self, d: _Data, i: int) -> None:
        self._d, self._i, self._c = d, i, d.record.residual_columns

    slot = _field("slot", "the slot name PyTorch uses, e.g. self, other, result")
    @property
    def shape(self) -> tuple[int, ...] | None:
        """The saved tensor's shape (None when not held)."""
        shape = self._c.shape[self._i]
        return None if shape is None else tuple(shape)

    dtype = _field("dtype", "e.g. float32")
    device = _field("device", "e.g. cpu, cuda:0")
    nbytes = _field("nbytes", "visible bytes: the elements this tensor shows")
    role = _field("role", "the role in words")
    rule = _field("rule", "the formulas that read it")
    from_node = _field("from_node", "the forward node that made the value (its index), if one in the trace did")
    from_name = _field("from_name", "else the leaf or constant's name")
    place = _field("place", "where the value is kept until backward reads it")
    version = _field("version", "the version counter (now, for a value modified in place)")
    error = _field("error", "PyTorch's message when reading it failed")
    saved_version = _field("saved_version", "version counter when saved (known once it changed)")
    preview = _field("preview", "the values, for tensors of at most 4 elements (as text)")
    modified_by = _field("modified_by", "in-place calls seen under capture")
    kind = _field("kind", "the role of the saved value")
    hook = _field("hook", "the unpack hook's qualified name, for HeldIn.HOOK")

    @property
    def node(self) -> Node:
        """The node that saved it."""
        return Node(self._d, self._c.node[self._i])

    @property
    def storage(self) -> Storage | None:
        """The allocation it points into (None when not held)."""
        k = self._c.storage[self._i]
        return None if k is None else Storage(self._d, k)

    @property
    def status(self) -> Status:
        """Where autograd stands with it: as traced, RELEASED once an observed backward released it."""
        lt = self._d.observed_lifetime(self._i)
        return Status.RELEASED if lt is not None and lt.released_at is not None else self._c.status[self._i]

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
        c, i = self._c, self._i
        if c.from_node[i] is not None:
            return None
        if c.from_name[i] is not None:
            return c.from_name[i]
        kind = c.kind[i]
        return kind.value if kind in LEAF_KINDS else None

    @property
    def producer(self) -> int | str | None:
        """from_node, else leaf_source: the index of the node that made the value, or a leaf's name."""
        return self._c.from_node[self._i] if self._c.from_node[self._i] is not None else self.leaf_source

    @property
    def held_in(self) -> str:
        """Where the value is kept, in words (a custom hook is named)."""
        place, hook = self._c.place[self._i], self._c.hook[self._i]
        return place.value if hook is None else f"{place.value} {hook}"

    @property
    def pinned_nbytes(self) -> int | None:
        """Bytes of the whole allocation this residual keeps alive (None if the graph holds none)."""
        k = self._c.storage[self._i]
        return None if k is None else self._d.record.storage_columns.nbytes[k]

    @property
    def label(self) -> str:
        """`#index NodeName.slot`, e.g. `#0 MulBackward0.other`."""
        node = self._c.node[self._i]
        return f"#{node} {self._d.record.node_columns.name[node]}.{self._c.slot[self._i]}"

    def __repr__(self) -> str:
        return f"Residual({self.label}, {self.shape}, {self.dtype})"


class Storage(_View):
    """A view of one backing allocation that residuals point into, counted once."""

    __slots__ = ()

    def __init__(self, d: _Data, i: int) -> None:
        self._d, self._i, self._c = d, i, d.record.storage_columns

    key = _field("key", "device and base address (the storage object's identity without data)")
    nbytes = _field("nbytes", "bytes of the whole allocation")
    device = _field("device", "where it lives")
    names = _field("names", "user variables / parameters that point at it")
    is_parameter = _field("is_parameter", "whether a parameter or a leaf that gets a gradient owns it")
    is_output = _field("is_output", "whether a traced output lives in it")
    leaf_role = _field("leaf_role", "INPUT or PARAMETER when a leaf that gets a gradient owns it")

    @property
    def residuals(self) -> list[Residual]:
        """The residuals that point into it."""
        d = self._d
        return [Residual(d, j) for j in self._c.residuals[self._i]]

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
        self._c = lifetimes.order[k]  # the node whose rule ran

    @property
    def node(self) -> Node:
        """The node whose rule ran."""
        return Node(self._d, self._c)

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




class TraceData:
    """What every view reads: the record (nodes, residuals, storages), its lifetimes (observed
    once backward ran, else predicted) and the views over its rows, made once when read."""

    def __init__(self, record: Record, observed: Lifetimes | None = None,
                 weaks: tuple[int, ...] | None = None) -> None:
        self._data = _Data(record, observed, weaks)
        self._views: dict[str, list[Any]] = {}

    def _cached(self, what: str, make: Callable[[], list[Any]]) -> list[Any]:
        views = self._views.get(what)
        if views is None:
            views = self._views[what] = make()
        return views

    def _observed(self, lifetimes: Lifetimes | None, observer: Any = None) -> None:
        """observe.py's one write: the observer while backward runs, then the observed lifetimes."""
        self._data.observing = observer
        self._data.observed = lifetimes
        self._views.pop("steps", None)

    @property
    def record(self) -> Record:
        """What the trace knows, as plain immutable data."""
        return self._data.record

    @property
    def nodes(self) -> list[Node]:
        """The forward ops, in forward order."""
        d = self._data
        return self._cached("nodes", lambda: [Node(d, i) for i in range(d.record.n_nodes)])

    @property
    def residuals(self) -> list[Residual]:
        """Every saved tensor of every node, in forward order."""
        d = self._data
        return self._cached("residuals", lambda: [Residual(d, i) for i in range(d.record.n_residuals)])

    @property
    def storages(self) -> list[Storage]:
        """The distinct allocations residuals point into."""
        d = self._data
        return self._cached("storages", lambda: [Storage(d, i) for i in range(d.record.n_storages)])

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
        """In-place calls seen under capture after the graph's first node."""
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

    def retained_words(self) -> str:
        """` (retain_graph: nothing released)` after a backward that kept the graph (or what another backward
        call a rule or hook started released, where one did); empty otherwise."""
        if not self.retained:
            return ""
        if any(s.released for s in self.steps):
            return " (retain_graph: released only by another backward call a rule or hook started)"
        return " (retain_graph: nothing released)"

    @property
    def error(self) -> str | None:
        """PyTorch's message if the observed backward raised."""
        watched = self._data.watched()
        return None if watched is None else watched.error

    @property
    def saved_bytes(self) -> int:
        """Bytes of the distinct storages the graph holds through its residuals."""
        return sum(self.record.storage_columns.nbytes)

    @property
    def saved_bytes_by_device(self) -> dict[str, int]:
        """saved_bytes split by where the storages live (offloaded residuals count on the host)."""
        out: dict[str, int] = {}
        c = self.record.storage_columns
        for device, nbytes in zip(c.device, c.nbytes):
            out[device] = out.get(device, 0) + nbytes
        return out

    def graph_owned_storages(self) -> list[Storage]:
        """Storages only the graph holds (not parameters, named user variables or the outputs):
        what dropping the graph gives back."""
        return [s for s in self.storages if not s.is_parameter and not s.names and not s.is_output]

    @property
    def visible_bytes(self) -> int:
        """Sum of the residuals' own element bytes: the naive estimate from shapes."""
        return sum(filter(None, self.record.residual_columns.nbytes))  # (None: a value not held)

    def summary(self) -> str:
        """One line: nodes, residuals, storages and bytes."""
        rec = self.record
        return (
            f"{rec.n_nodes} forward ops, {rec.n_residuals} residuals in "
            f"{rec.n_storages} storages: pinned {format_bytes(self.saved_bytes)}, "
            f"visible {format_bytes(self.visible_bytes)}"
        ) + (f" ({self.without_data} tensors: predicted from shapes, no values)" if self.without_data else "")
