"""ex02 · A small trace: which value each rule reads, and when it can go."""

from __future__ import annotations

import torch

from ..capture import trace
from .base import Exercise, Question, equal_judge


def _observed() -> object:
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    tr = trace(_program(a, b))
    tr.backward()
    return tr


def _program(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.exp() * b).sum()  # the exp output is reachable only through the graph


def _order(inputs: dict) -> list[str]:
    return [s.node.name for s in _observed().steps]


def _reads(inputs: dict) -> dict:
    return {s.node.name: [r.slot for r in s.used] for s in _observed().steps}


def _freed(inputs: dict) -> dict:
    return {f"{r.node.name}.{r.slot}": r.freed_at for r in _observed().residuals}


EXERCISE = Exercise(
    "ex02", "A small trace, by hand", "02_small_trace",
    (
        Question("q1", 2, "y = (a.exp() * b).sum(): the reverse rules in the order backward runs them",
                 "q1_order", equal_judge(_order, "a list of node names such as 'SumBackward0', in reverse order")),
        Question("q2", 2, "for each reverse rule, the saved slots it reads",
                 "q2_reads", equal_judge(_reads, "a dict {node name: [slots it reads]} with every rule")),
        Question("q3", 2, "for each residual 'Node.slot', the step after which its memory is freed (None if kept)",
                 "q3_freed", equal_judge(_freed, "a dict {'Node.slot': step index or None} for every residual")),
    ),
)
