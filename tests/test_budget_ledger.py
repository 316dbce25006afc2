"""Naming every byte of a hand-written allocation stream: the attribution without running a model
(and the CUDA-shaped stream, with bytes from before the step no storage explains, without a GPU)."""

import pytest

from tracekit.memory import AllocationStream
from tracekit.memory_budget import ALLOCATED, _attribute

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

