"""Naming every byte of a hand-written allocation stream: the attribution without running a model
(and the CUDA-shaped stream, with bytes from before the step no storage explains, without a GPU)."""

import json
from pathlib import Path

import pytest
import torch

from tracekit.memory import AllocationStream, stream_from_events
from tracekit.memory_budget import ALLOCATED, _attribute
from tracekit.memory_budget.ledger import _fill_unreported

PARAMS = ("parameters", 100)
# pointer 2: saved at "mid", freed before the end; 3: made and freed between marks, held by no one
# (a temporary); 4: made after "mid", a gradient at the end (its category from the start is what it becomes)
EVENTS = [(2, 40), (3, 10), (3, -10), (4, 8), (2, -40)]
MARKS = [("start", 0), ("mid", 2), ("end", 5)]
OBSERVATIONS = [{1: PARAMS}, {1: PARAMS, 2: ("saved activations", 40)}, {1: PARAMS, 4: ("gradients", 8)}]


@pytest.mark.parametrize("before_the_step", [None, 130])
def test_every_byte_of_a_stream_has_one_category(before_the_step):
    stream = AllocationStream("cuda" if before_the_step else "cpu", EVENTS, MARKS,
                              allocated_at_start=before_the_step)
    measured, series, moments = _attribute(stream, OBSERVATIONS, [label for label, _ in MARKS])
    unexplained = (before_the_step or 100) - 100  # CUDA counts bytes that no storage seen at the start explains
    assert measured == [x + unexplained for x in (100, 140, 150, 140, 148, 108)]
    assert series["parameters"] == [100] * 6
    assert series["saved activations"] == [0, 40, 40, 40, 40, 0]
    assert series["temporary workspaces"] == [0, 0, 10, 0, 0, 0]
    assert series["gradients"] == [0, 0, 0, 0, 8, 8]
    assert series["unattributed"] == [unexplained] * 6
    for i, total in enumerate(measured):
        assert sum(series[c][i] for c in ALLOCATED) == total
    assert [(m.label, m.position, m.live) for m in moments] == [
        ("start", 0, 100 + unexplained), ("mid", 2, 150 + unexplained), ("end", 5, 108 + unexplained)]
    assert moments[1].bytes["temporary workspaces"] == 10 and moments[2].bytes["gradients"] == 8



# The profiler's allocation events of two tk.budget(device="cuda") steps (default model, warm-up
# included), recorded on an H200 with torch 2.11: (time, pointer, bytes, total allocated, total
# reserved) per event, and each mark's probe (label, bytes, pointer, the allocator's total just
# before it). The profiler left out 10 frees in each, which the totals show. In the second, mark
# 0's 512-byte probe has the size and address of two ordinary allocations, one before it (in the
# warm-up) and one after. (The totals before each probe, which tk.measure records now, were added
# to these recordings from the probes' own events.)
H200_STREAMS = sorted((Path(__file__).parent / "data").glob("h200_torch2.11_budget_allocator_events_*.json"))


def _gaps(raw):
    return [i for i in range(1, len(raw)) if raw[i][3] - raw[i][2] != raw[i - 1][3]]


@pytest.mark.parametrize("path", H200_STREAMS, ids=lambda p: p.stem[-1])
def test_a_cuda_stream_with_frees_the_profiler_left_out_adds_up_to_the_allocators_totals(path):
    recorded = json.loads(path.read_text())
    raw, sentinels = [tuple(e) for e in recorded["raw"]], [tuple(s) for s in recorded["sentinels"]]
    assert len(_gaps(raw)) == 10  # what the recording holds: frees with no event
    stream = stream_from_events(raw, torch.device("cuda"), sentinels)
    assert [label for label, _ in stream.marks] == [label for label, *_ in sentinels]
    assert stream.allocated_at_start == sentinels[0][3]
    # at each mark the stream's bytes are the allocator's total just before the mark's probe
    assert [stream.allocated_at_start + sum(d for _, d in stream.events[:position])
            for _, position in stream.marks] == [total for *_, total in sentinels]
    # and no address is handed out twice without a free between (frees of older allocations aside)
    live = set()
    for ptr, d in stream.events:
        assert ptr not in live if d > 0 else True
        (live.add if d > 0 else live.discard)(ptr)
    assert len(stream.reserved) == len(stream.events)


def test_a_mark_is_its_probe_at_the_total_it_was_made_at():
    # mark "start" probes 512 bytes at 99 with 1024 allocated; an ordinary 512-byte allocation at
    # 99 happened before (at 512 allocated) and is no mark
    raw = [(0, 99, 512, 1024, 0), (1, 99, -512, 512, 0), (2, 10, 512, 1024, 0), (3, 99, 512, 1536, 0),
           (4, 99, -512, 1024, 0), (5, 20, 512, 1536, 0), (6, 99, 1024, 2560, 0), (7, 99, -1024, 1536, 0)]
    sentinels = [("start", 512, 99, 1024), ("end", 1024, 99, 1536)]
    stream = stream_from_events(raw, torch.device("cuda"), sentinels)
    assert stream.marks == [("start", 0), ("end", 1)] and stream.events == [(20, 512)]
    assert stream.allocated_at_start == 1024


def test_an_unreported_free_goes_to_the_allocation_whose_address_comes_back():
    # two live 512-byte allocations at 10 and 20; the total drops by 512 with no event before
    # event 3 (an allocation at 30); 20 is handed out again next, so 20 was the one freed
    sentinels = [("start", 1536, 99, 1024), ("end", 2048, 99, 1536)]
    raw = [(0, 10, 512, 512, 4096), (1, 20, 512, 1024, 4096), (2, 99, 1536, 2560, 4096), (3, 99, -1536, 1024, 4096),
           (4, 30, 512, 1024, 4096), (5, 20, 512, 1536, 4096), (6, 99, 2048, 3584, 4096), (7, 99, -2048, 1536, 4096)]
    stream = stream_from_events(raw, torch.device("cuda"), sentinels)
    assert stream.events == [(20, -512), (30, 512), (20, 512)]
    assert stream.marks == [("start", 0), ("end", 3)]
    assert stream.allocated_at_start == 1024
    # a probe whose free the profiler left out is dropped, not counted as a free of something else
    raw = [(0, 10, 512, 512, 0), (1, 99, 1536, 2048, 0), (2, 30, 512, 1024, 0), (3, 99, 2048, 3072, 0),
           (4, 99, -2048, 1024, 0)]
    sentinels = [("start", 1536, 99, 512), ("end", 2048, 99, 1024)]
    stream = stream_from_events(raw, torch.device("cuda"), sentinels)
    assert stream.events == [(30, 512)] and stream.marks == [("start", 0), ("end", 1)]
    # on CPU the events carry no totals to go by: nothing is put back here (the ledger's _fill_unreported does)
    assert stream_from_events(raw, torch.device("cpu"), [s[:3] for s in sentinels]).events == [(30, 512)]


def test_a_reported_free_of_memory_older_than_the_measurement_takes_the_storages_size():
    """The CPU allocator's table of sizes keeps an older allocation's size at an address (made under an
    earlier profiler, freed with none running) and reports the next block there with it: a 1 KiB gradient
    freed as 8 KiB. The ledger gives the free the size of the storage seen there at the first mark."""
    observations = [{1: ("parameters", 100), 2: ("gradients", 1024)}, {1: ("parameters", 100)}]
    stream = AllocationStream("cpu", [(2, -8192)], [("start", 0), ("after zero_grad", 1)])
    filled, added = _fill_unreported(stream, observations, [[], []])
    assert filled.events == [(2, -1024)] and added == 0
    measured, series, moments = _attribute(filled, observations, ["start", "after zero_grad"])
    assert measured == [1124, 100] and series["gradients"] == [1024, 0]
    assert moments[0].bytes["gradients"] == 1024 and moments[1].bytes["gradients"] == 0


def _at_a_stale_address(size: int = 256):
    """A new float tensor of `size` elements at an address where the CPU allocator still notes an 8 KiB
    block's size (made under a profiler, freed with none running); None if the allocator never hands
    such an address out again (it did at the first try in each of 30 tries here)."""
    from tracekit.memory import measure

    for _ in range(20):
        with measure("cpu", allocations=True, collect=False):
            big = torch.empty(2048)  # 8 KiB, its size noted by the allocator while the profiler runs
        address = big.data_ptr()
        del big  # freed with no profiler running: the note stays
        candidates = [torch.zeros(size) for _ in range(64)]  # one of them is usually cut from that block
        found = [t for t in candidates if t.data_ptr() == address]
        del candidates
        if found:
            return found[0]
    return None


def test_the_profilers_stale_size_does_not_reach_the_budget():
    """The same on the real profiler: a 1 KiB gradient put where an 8 KiB block made under an earlier
    profiler was freed with none running, then freed during a budget's step: the profiler reports its
    free as 8 KiB, and the budget counts the gradients it held as 1 KiB."""
    import tracekit as tk
    from tracekit.memory import measure

    model = torch.nn.Linear(16, 16, bias=False)  # weight: 1 KiB
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    grad = _at_a_stale_address()
    if grad is None:
        pytest.skip("the allocator never handed the address out again")
    address, model.weight.grad = grad.data_ptr(), grad.view(16, 16)
    del grad
    with measure("cpu", allocations=True, collect=False) as probe:
        probe.mark("start")
        model.weight.grad = None
        probe.mark("end")
    assert probe.result.allocations.events == [(address, -8192)]  # what the profiler reports
    grad = _at_a_stale_address()  # again, for the budget's own measurement (warmup=False: it frees the gradient)
    if grad is None:
        pytest.skip("the allocator never handed the address out again")
    model.weight.grad = grad.view(16, 16)
    del grad
    b = tk.budget(model, opt, (x, y), loss_fn=torch.nn.functional.mse_loss, warmup=False)
    assert b.moment("start").bytes["gradients"] == 1024
    assert b.moment("after zero_grad").bytes["gradients"] == 0
