"""A paper's activation-memory formula, term by term against the residuals PyTorch keeps.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
count the activations one transformer layer keeps for backward, with 16-bit activations and
dropout, as s·b·h·(34 + 5·a·s/h) bytes (s sequence, b batch, h hidden, a heads):
attention 11·sbh + 5·as²b, MLP 19·sbh, the two LayerNorms 4·sbh. `korthikanti()` builds
`GPTBlock` (laid out like theirs), traces it, and puts every term next to the residuals
that make it — found from the tensors the block marks, not typed in — and lists what eager
PyTorch keeps beyond the formula.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import torch

from .capture import trace as trace_graph
from .reader import Residual, Storage
from .render.table import Table
from .storage import format_bytes, storage_key
from .trace import Trace
from .transformer import SAVED_BY, SLOT_OF, GPTBlock

# (term, formula in the paper's units, bytes as a function of s, b, h, a)
TERMS: list[tuple[str, str, Any]] = [
    ("LayerNorm 1 input", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("QKV linear input", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("Q (for QKᵀ)", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("K (for QKᵀ)", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("softmax output", "2as²b", lambda s, b, h, a: 2 * a * s * s * b),
    ("softmax dropout mask", "as²b", lambda s, b, h, a: a * s * s * b),
    ("dropout output (for ·V)", "2as²b", lambda s, b, h, a: 2 * a * s * s * b),
    ("V", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("projection input", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("projection dropout mask", "sbh", lambda s, b, h, a: s * b * h),
    ("LayerNorm 2 input", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("MLP fc1 input", "2sbh", lambda s, b, h, a: 2 * s * b * h),
    ("GeLU input", "8sbh", lambda s, b, h, a: 8 * s * b * h),
    ("MLP fc2 input", "8sbh", lambda s, b, h, a: 8 * s * b * h),
    ("MLP dropout mask", "sbh", lambda s, b, h, a: s * b * h),
]


def paper_bytes(seq: int, batch: int, hidden: int, heads: int) -> int:
    """The paper's closed form s·b·h·(34 + 5·a·s/h), in bytes (exact for integer inputs)."""
    return seq * batch * (34 * hidden + 5 * heads * seq)


@dataclass
class Term:
    """One term of the formula and the residuals that make it in the trace."""

    name: str
    expression: str
    formula_bytes: int
    residuals: list[Residual] = field(default_factory=list)
    eager_bytes: int = 0  # distinct storages of those residuals (each storage counted in one term only)
    shares: list[str] = field(default_factory=list)  # earlier terms whose storage these residuals live in

    @property
    def ratio(self) -> float | None:
        """Eager bytes over the formula's bytes."""
        return self.eager_bytes / self.formula_bytes if self.formula_bytes else None


@dataclass
class FormulaTable:
    """The formula term by term next to eager PyTorch's residuals, with the totals."""

    seq: int
    batch: int
    hidden: int
    heads: int
    device: str
    dtype: str
    terms: list[Term]
    extra: list[Storage]  # activation storages eager keeps that no term accounts for
    trace: Trace = field(repr=False)

    @property
    def formula_bytes(self) -> int:
        """The formula's total: the sum of its terms (equals paper_bytes)."""
        return sum(t.formula_bytes for t in self.terms)

    @property
    def eager_bytes(self) -> int:
        """Every activation storage eager keeps (parameters excluded), counted once."""
        return sum(t.eager_bytes for t in self.terms) + sum(s.nbytes for s in self.extra)

    @property
    def ratio(self) -> float:
        """Eager over formula."""
        return self.eager_bytes / self.formula_bytes

    @property
    def masks(self) -> list[Term]:
        """The dropout-mask terms."""
        return [t for t in self.terms if t.name.endswith("dropout mask")]

    @property
    def eager_bytes_with_byte_masks(self) -> int:
        """The eager total if every dropout mask kept one byte per element (a bool mask, what CUDA's
        fused dropout saves and what the paper counts) instead of what this trace's masks keep."""
        return self.eager_bytes - sum(t.eager_bytes - t.formula_bytes for t in self.masks if t.eager_bytes)

    def notes(self) -> list[str]:
        """What in this table is specific to the device it was traced on."""
        wide = sorted({r.dtype for t in self.masks for r in t.residuals if r.dtype != "bool"})
        if not wide:
            return []
        with_bytes = self.eager_bytes_with_byte_masks
        return [f"dropout masks: on {self.device} F.dropout saves its noise in {', '.join(wide)} (the "
                f"activation's dtype); on cuda it runs the fused native_dropout, which saves a bool mask "
                f"(1 B per element, the paper's count). With 1-byte masks eager would be "
                f"{format_bytes(with_bytes)} ({with_bytes:,} B) = {with_bytes / self.formula_bytes:.3f}× the paper."]

    def rows(self) -> list[tuple[str, ...]]:
        """Table rows: each term, each extra storage, and the totals."""
        out = []
        for t in self.terms:
            held = ", ".join(f"{r.label} {_shape(r)} {r.dtype}" for r in t.residuals) or "(none)"
            if t.shares:
                held += f" (in the storage counted under {', '.join(t.shares)})"
            out.append((t.name, t.expression, format_bytes(t.formula_bytes), held, format_bytes(t.eager_bytes),
                        f"{t.ratio:.2f}×" if t.ratio is not None else "-"))
        for s in self.extra:
            held = ", ".join(f"{r.label} {_shape(r)} {r.dtype}" for r in s.residuals)
            out.append(("not in the formula", "-", "0 B", held, format_bytes(s.nbytes), "-"))
        out.append(("total", "sbh(34 + 5as/h)", format_bytes(self.formula_bytes), "",
                    format_bytes(self.eager_bytes), f"{self.ratio:.3f}×"))
        return out

    def table(self) -> Table:
        """The comparison as a Table (text in a terminal, HTML in Jupyter)."""
        return Table(("term", "paper", "paper bytes", "eager residuals", "eager bytes", "eager/paper"), self.rows())

    def headline(self) -> str:
        """One line: sizes, both totals and their ratio."""
        return (f"s={self.seq} b={self.batch} h={self.hidden} a={self.heads} ({self.dtype}, {self.device}): "
                f"paper {format_bytes(self.formula_bytes)} ({self.formula_bytes:,} B), eager "
                f"{format_bytes(self.eager_bytes)} ({self.eager_bytes:,} B) = {self.ratio:.3f}× the paper")

    def __str__(self) -> str:
        return "\n".join([self.headline(), *(f"note: {n}" for n in self.notes()), str(self.table())])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        notes = "".join(f"<p><i>note: {html.escape(n)}</i></p>" for n in self.notes())
        return f"<p>{html.escape(self.headline())}</p>{notes}{self.table()._repr_html_()}"


def _shape(r: Residual) -> str:
    return "?" if r.shape is None else "(" + ", ".join(map(str, r.shape)) + ")"


def korthikanti(seq: int = 128, batch: int = 2, hidden: int = 256, heads: int = 8, device: str = "cpu",
                dtype: torch.dtype = torch.bfloat16, dropout: float = 0.1) -> FormulaTable:
    """Build GPTBlock(hidden, heads) on `device` ('cpu', 'meta', ...), trace one forward of a
    (batch, seq, hidden) input, and map each term of s·b·h·(34 + 5·a·s/h) to its residuals."""
    with torch.device(device):
        block = GPTBlock(hidden, heads, dropout, dtype=dtype)
        x = torch.randn(batch, seq, hidden, dtype=dtype, requires_grad=True)
    marks: dict[str, tuple[Any, ...]] = {}
    y = block(x, marks)
    tr = trace_graph(y)
    parameters = {storage_key(p) for p in block.parameters()}
    node_of = {g: n for g, n in zip(tr._graph_nodes, tr.nodes)}
    by_key = {s.key: s for s in tr.storages}
    claimed: dict[Any, str] = {}  # storage key -> the term it is counted under
    terms = []
    for name, expression, size in TERMS:
        term = Term(name, expression, size(seq, batch, hidden, heads))
        kind, tensor, *slot = marks.get(name, (None, None))
        if kind in (SAVED_BY, SLOT_OF):
            node = node_of.get(tensor.grad_fn)
            found = [r for r in node.residuals if r.storage is not None and (not slot or r.slot == slot[0])
                     ] if node is not None else []
        elif kind is not None:
            storage = by_key.get(storage_key(tensor))
            found = list(storage.residuals) if storage is not None else []
        else:
            found = []
        term.residuals = found
        for r in found:
            if r.storage.key not in claimed:
                claimed[r.storage.key] = name
                term.eager_bytes += r.storage.nbytes
            elif claimed[r.storage.key] != name and claimed[r.storage.key] not in term.shares:
                term.shares.append(claimed[r.storage.key])
        terms.append(term)
    extra = [s for s in tr.storages if s.key not in claimed and s.key not in parameters]
    marks.clear()
    return FormulaTable(seq, batch, hidden, heads, device, str(dtype).removeprefix("torch."), terms, extra, tr)
