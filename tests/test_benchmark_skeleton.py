"""The benchmarks' skeleton row (benchmarks/skeleton.py) claims to read every fact a captured,
observed trace reads: on the programs it is timed on, and on others, it must see what tracekit sees
(the nodes and their lines, the saved tensors and storages, the reverse order, each release and
each free), or the floor it sets under the capture rows is not a floor of the same work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tracekit as tk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import skeleton  # noqa: E402


def _scalars() -> torch.Tensor:
    x, w, b = (torch.tensor(v, requires_grad=True) for v in (0.5, 0.9, 0.1))
    h = x
    for _ in range(30):
        h = torch.tanh(w * h + b) + 0.1 * h
    return h


def _mlp() -> torch.Tensor:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    return net(torch.randn(4, 8)).pow(2).mean()


def _views_and_outputs() -> torch.Tensor:
    torch.manual_seed(1)
    w = torch.randn(6, 6, requires_grad=True)
    data = torch.randn(3, 6)  # a constant: no gradient
    h = torch.sigmoid(data @ w.t())  # w.t(): a view of a leaf, saved by mm
    parts = h[:, :3] * h[:, 3:]  # two views of one storage, both saved
    return torch.exp(parts).sum()


def _line(code: object, offset: int) -> int:
    return next(line for start, end, line in code.co_lines() if start <= offset < end)  # type: ignore[attr-defined]


@pytest.mark.parametrize("program", [_scalars, _mlp, _views_and_outputs])
def test_the_skeleton_reads_what_a_captured_observed_trace_reads(program) -> None:
    mode = skeleton.CallMode()
    with mode:
        y = program()
    bare = skeleton.skeleton_trace([y], mode.calls)
    order, released, freed = skeleton.skeleton_backward(y, bare)

    with tk.capture() as cap:
        y2 = program()
    tr = cap.trace(y2, progress=False)
    tr.backward()
    record, lifetimes = tr.record, tr.lifetimes()

    assert [row[0] for row in bare["nodes"]] == [n.name for n in tr.nodes]
    assert [[i for i in row[1] if i is not None] for row in bare["nodes"]] == [  # the inputs made by nodes
        [i for i in n.inputs if isinstance(i, int)] for n in tr.nodes]
    lines = [f":{_line(call[1], call[2])}" if call else None for call in (row[5] for row in bare["nodes"])]
    assert all(line is None or (n.source or "").endswith(line) for line, n in zip(lines, tr.nodes))
    assert sum(line is not None for line in lines) >= len(lines) // 2  # most nodes start a call of their own
    assert [(r[0], r[1], r[2], r[4]) for r in bare["residuals"]] == [
        (r.node, r.slot, r.shape, r.nbytes) for r in record.residuals]
    assert [r[5] for r in bare["residuals"]] == list(record.residual_columns.storage)  # storages: one per allocation
    assert [row[1] for row in bare["storages"]] == list(record.storage_columns.nbytes)
    st = record.storage_columns  # watched in backward: neither a parameter's (or input leaf's) nor an output's
    assert [row[2] for row in bare["storages"]] == [not (p or o) for p, o in zip(st.is_parameter, st.is_output)]
    assert order == list(lifetimes.order)
    by_step = sorted((k, record.residual_columns.node[j]) for k, step in enumerate(lifetimes.released)
                     for j in set(step))
    assert sorted(set(released)) == sorted(set(by_step)) and released
    assert sorted(freed) == sorted((k, s) for k, step in enumerate(lifetimes.freed) for s in step)
    assert freed  # something was seen going away while backward ran
