"""The record: everything a trace knows, as rows of plain data (`NodeRow`, `ResidualRow`,
`StorageRow`, mutations, leaves, outputs, the selective-checkpoint cache) and the enums its rows
use. No tensor, node or graph inside: picklable, JSON through trace_format.py. The views made
when the record is read (`Node`, `Residual`, ...) are in reader.py; `Trace` is in trace.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, NamedTuple

from .storage import StorageKey

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


LEAF_KINDS = (Role.CONSTANT, Role.INPUT, Role.PARAMETER)


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


class Formatted(Sequence):
    """A text column made when it is first read (`make` returns its values): the build keeps what
    role words and value previews are made of, and a view, JSON or pickle reads the text. It reads,
    compares and pickles as the tuple of its text."""

    __slots__ = ("_make", "_text")

    def __init__(self, make: Callable[[], Sequence[Any]]) -> None:
        self._make: Callable[[], Sequence[Any]] | None = make
        self._text: tuple[Any, ...] | None = None

    def text(self) -> tuple[Any, ...]:
        """The column as a tuple (made on the first read, then kept)."""
        if self._text is None:
            assert self._make is not None
            self._text, self._make = tuple(self._make()), None
        return self._text

    def __getitem__(self, i: Any) -> Any:
        return self.text()[i]

    def __len__(self) -> int:
        return len(self.text())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.text())

    def __eq__(self, other: object) -> bool:
        return self.text() == (other.text() if isinstance(other, Formatted) else other)

    def __hash__(self) -> int:
        return hash(self.text())

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self.text(),))

    def __repr__(self) -> str:
        return repr(self.text())


def _columns(name: str, row: type) -> Any:
    """A NamedTuple type with one tuple per field of `row`: a table stored by column."""
    return NamedTuple(name, [(f, tuple) for f in row._fields])  # type: ignore[misc]


NodeColumns = _columns("NodeColumns", NodeRow)
ResidualColumns = _columns("ResidualColumns", ResidualRow)
StorageColumns = _columns("StorageColumns", StorageRow)


def columns_of(kind: Any, rows: Any) -> Any:
    """A table's columns (`kind`: NodeColumns, ...) from its rows."""
    rows = tuple(rows)
    if not rows:
        return kind(*(() for _ in kind._fields))
    return kind(*zip(*rows))


def _plain_shape(shape: Any) -> tuple[int, ...] | None:
    return None if shape is None else tuple(shape)


@dataclass(frozen=True)
class Record:
    """Everything a trace knows, as plain immutable data (see docs/trace-format.md): the nodes,
    residuals and storages stored by column (one tuple per field, `node_columns.name[i]`); their rows
    (`nodes`, `residuals`, `storages`: NodeRow, ResidualRow, StorageRow) are made when first read."""

    node_columns: Any  # NodeColumns
    residual_columns: Any  # ResidualColumns
    storage_columns: Any  # StorageColumns
    leaves: tuple[tuple[str, str], ...]  # leaf label -> description (role, shape, dtype)
    leaf_roles: tuple[tuple[str, Role], ...]
    outputs: tuple[tuple[int | None, str | None], ...]  # per traced output: its node, the caller's name
    captured: bool
    mutations: tuple[Mutation, ...]
    without_data: str | None  # "meta" or "fake": shapes and bytes only, no values
    cache: tuple[CachedValue, ...] = ()  # what a selective-checkpoint policy keeps (diff.py)
    version: int = FORMAT_VERSION
    _rows: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_rows(cls, nodes: Any, residuals: Any, storages: Any, *rest: Any) -> Record:
        """A record from its rows (NodeRow, ResidualRow, StorageRow) and the other fields in order."""
        return cls(columns_of(NodeColumns, nodes), columns_of(ResidualColumns, residuals),
                   columns_of(StorageColumns, storages), *rest)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Record, tuple(getattr(self, f.name) for f in fields(self) if f.name != "_rows"))

    def _table(self, what: str, row: Any, columns: Any) -> tuple[Any, ...]:
        made = self._rows.get(what)
        if made is None:
            made = self._rows[what] = tuple(map(row._make, zip(*columns))) if columns[0] else ()
        return made

    @property
    def nodes(self) -> tuple[NodeRow, ...]:
        """One row per forward op, in forward order (made when first read)."""
        return self._table("nodes", NodeRow, self.node_columns)

    @property
    def residuals(self) -> tuple[ResidualRow, ...]:
        """One row per saved tensor, in forward order (made when first read)."""
        c = self.residual_columns  # shapes are plain tuples (a torch.Size in a record made otherwise: a tuple here)
        return self._table("residuals", ResidualRow, c._replace(shape=tuple(map(_plain_shape, c.shape))))

    @property
    def storages(self) -> tuple[StorageRow, ...]:
        """One row per allocation residuals point into (made when first read)."""
        return self._table("storages", StorageRow, self.storage_columns)

    @property
    def n_nodes(self) -> int:
        """How many forward ops."""
        return len(self.node_columns.name)

    @property
    def n_residuals(self) -> int:
        """How many saved tensors."""
        return len(self.residual_columns.node)

    @property
    def n_storages(self) -> int:
        """How many allocations."""
        return len(self.storage_columns.key)
