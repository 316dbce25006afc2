"""The benchmarks' C++ floor row (benchmarks/cpp_reads.cpp) claims to make bare_reads' reads in one C++
call: on the programs it is timed on, and on one with views, indices, a transposed and a bool value and
two custom Functions, it must read the same saved tensors with the same facts (or the floor it shows is
not a floor of the same work). Where the two differ off these programs (a CopySlices' wrapped node, lists
of saved tensors, a tensor one node saves twice) is said in cpp_reads.cpp. It compiles with torch's
cpp_extension (~15 s once on an idle machine), so it is a slow test; it skips where no compiler or ninja is found."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_benchmark_skeleton import _mlp, _scalars  # the programs the skeleton is checked on

import tracekit as tk
from tracekit.live import forward_order, walk
from tracekit.storage import drop_weak_ref

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import cpp_reads  # noqa: E402
import run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def module():
    if shutil.which("c++") is None or shutil.which("ninja") is None and not _pip_ninja():
        pytest.skip("no C++ compiler or ninja: the C++ floor row is left out, as run.py leaves it")
    header = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "dynamo" / "compiled_autograd.h"
    if not header.exists():
        pytest.skip(f"this torch ({torch.__version__}) ships no compiled autograd header: no C++ floor row")
    built = cpp_reads.reader()
    assert not isinstance(built, str), built  # a compiler and the header are here: it must build
    return built


def _pip_ninja() -> bool:
    try:
        import ninja  # noqa: F401
    except ImportError:
        return False
    return True


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class _Cube(_Square):
    """A second custom Function: its node is of the same C++ type as _Square's, with its own name."""


def _views_ints_transposes_and_functions() -> torch.Tensor:
    torch.manual_seed(1)
    w = torch.randn(6, 6, requires_grad=True)
    h = torch.sigmoid(torch.randn(3, 6) @ w.t())  # w.t(): a view of a leaf, saved by mm
    parts = h[:, :3] * h[:, 3:]  # two views of one storage, both saved
    top = parts.max(dim=1).values  # saves int64 indices
    small = torch.randn(2, 2, requires_grad=True) * torch.tensor([[1.0, 2.0], [3.0, 4.0]]).t()  # saves a transpose
    flags = top * torch.tensor([True, False, True])  # saves a bool tensor
    custom = _Cube.apply(_Square.apply(top))  # two custom Functions: read as saving nothing, by either reader
    return (torch.exp(parts).sum() + small.sum() + flags.sum() + custom.sum()).double()


def _flat(values: object) -> object:
    if isinstance(values, list):
        return tuple(v for item in values for v in (_flat(item) if isinstance(item, (list, tuple)) else (item,)))
    return values


@pytest.mark.parametrize("program", [_scalars, _mlp, _views_ints_transposes_and_functions])
def test_the_cpp_floor_reads_what_bare_reads_reads(module, program) -> None:
    y = program()
    nodes, saved, storages = module.read_graph([y])
    for _, _, ref, _ in storages:
        drop_weak_ref(ref)
    rows, _ = run.bare_reads([y])
    graph = forward_order(walk([y.grad_fn]))
    assert [name for name, _, _ in nodes] == [g.name() for g in graph]
    assert [seq for _, seq, _ in nodes] == [g._sequence_nr() for g in graph]
    position = {g: i for i, g in enumerate(graph)}
    assert [tuple(None if i == -1 else i for i in inputs) for _, _, inputs in nodes] == [
        tuple(position.get(n) for n, _ in g.next_functions) for g in graph]
    # per node, the same saved tensors, row for row (values as tolist reads them: a transpose's in order)
    python = Counter((r[0], r[3], r[4], r[5], r[7], r[8], repr(_flat(r[9]))) for r in rows)
    cpp = Counter((r[0], r[2], r[3], r[4], None if r[6] == -1 else r[6], r[7], repr(_flat(r[8]))) for r in saved)
    assert cpp == python
    # the same storages: each C++ row's address is the storage tracekit's own record gives that residual
    record = tk.trace(y, progress=False).record
    rc, keys = record.residual_columns, record.storage_columns.key
    custom = {i for i, g in enumerate(graph) if isinstance(g, torch.autograd.function.BackwardCFunction)}
    traced = {(node, keys[s][1]) for node, s in zip(rc.node, rc.storage) if s is not None and node not in custom}
    assert {(r[0], r[1]) for r in saved} == traced
    assert len(storages) == len({address for _, address in traced}) == len({r[6] for r in rows})
    assert all(storages[r[5]][0] == r[1] for r in saved)  # a row's storage index is its address's
    assert [nbytes for _, nbytes, _, _ in storages] == [
        next(record.storage_columns.nbytes[s] for s, key in enumerate(keys) if key[1] == address)
        for address, _, _, _ in storages]


def test_a_value_behind_a_saved_tensor_hook_is_not_unpacked(module) -> None:
    unpacked = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        unpacked.append(t)
        return t

    x = torch.randn(4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = x.exp().sum()
    nodes, saved, storages = module.read_graph([y])
    assert [name for name, _, _ in nodes] == ["ExpBackward0", "SumBackward0"]
    assert storages == []
    assert saved == [] and unpacked == []  # bare_reads skips it too (its raw slot has an unpack hook)
    assert run.bare_reads([y])[0] == []
