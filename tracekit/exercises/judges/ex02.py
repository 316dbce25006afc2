"""ex02 judges: order, reads and free points of small programs, observed on the runtime now.

q1: correct = the order backward runs the rules, or any other order in which every rule comes
after all the rules that feed it a gradient (only P6 has such a choice). Wrong: forward order,
AccumulateGrad included, a rule missing.
q2: correct = per rule, the set of slots it reads (any order, list/set/tuple). Wrong: slots a
rule saves for another requires-grad pattern; a rule missing.
q3: correct = per residual, the step after which its storage is freed, None if kept (e.g. by a
leaf the user holds) — in the engine's order, or in any other valid order of independent rules
(the steps that order would give). Wrong: the step it was released by its rule when another rule (or the
user) still holds the same storage.
"""

from __future__ import annotations

import functools

import torch

from ...capture import trace
from ..ex02 import PROGRAMS
from .common import as_set, by_table, dict_diff


def run(program: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, a, b) of the program, on fresh tensors (requires grad as the table says)."""
    src, who = PROGRAMS[program]
    a = (torch.rand(4) + 0.5).requires_grad_("a" in who)
    b = (torch.rand(4) + 0.5).requires_grad_("b" in who)
    return eval(src, {"a": a, "b": b}), a, b  # noqa: S307 - our own fixed program text


@functools.cache
def observed(program: str) -> dict:
    """Run the program on fresh tensors and observe its backward, holding a, b and y (as the
    prompt says) until every answer is read off: the order, the reads, the free points."""
    y, a, b = run(program)
    tr = trace(y)
    tr.backward()
    order = [s.node.name for s in tr.steps]
    holders: dict[object, set[str]] = {}
    for r in tr.residuals:
        holders.setdefault(r.storage, set()).add(r.node.name)
    facts = {"order": order,
             "reads": {s.node.name: frozenset(r.slot for r in s.used) for s in tr.steps},
             "freed": {f"{r.node.name}.{r.slot}": r.freed_at for r in tr.residuals},
             # per residual: the rules saving its storage (None: the user still holds it after backward)
             "holders": {f"{r.node.name}.{r.slot}": None if r.freed_at is None else frozenset(holders[r.storage])
                         for r in tr.residuals}}
    del y, a, b  # held until here
    return facts


@functools.cache
def _dependencies(program: str) -> dict[str, set[str]]:
    """node name -> names of the nodes that must run before it (those that feed it a gradient)."""
    y, _, _ = run(program)
    before: dict[str, set[str]] = {}
    stack = [y.grad_fn]
    while stack:
        node = stack.pop()
        before.setdefault(node.name(), set())
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt.name() != "torch::autograd::AccumulateGrad":
                before.setdefault(nxt.name(), set()).add(node.name())
                stack.append(nxt)
    return before


def valid_orders(program: str) -> list[list[str]]:
    """Every order of the program's rules in which each comes after all the rules that feed it."""
    before = _dependencies(program)
    orders: list[list[str]] = []

    def extend(done: list[str]) -> None:
        if len(done) == len(before):
            orders.append(done)
        for name in sorted(before):
            if name not in done and before[name] <= set(done):
                extend([*done, name])

    extend([])
    return orders


def freed_under(program: str, order: list[str]) -> dict[str, int | None]:
    """The free step of each residual if backward ran the rules in `order`: after the last rule
    that saves its storage (None where the user still holds it)."""
    return {key: None if who is None else max(order.index(n) for n in who)
            for key, who in observed(program)["holders"].items()}


def _order_entry(program: str, got: object) -> tuple[bool, str]:
    truth = observed(program)["order"]
    if not isinstance(got, list) or not all(isinstance(g, str) for g in got):
        return False, "give a list of node names"
    got = [g.strip() for g in got]
    if sorted(got) != sorted(truth):
        return False, ("the rules listed are not the program's rules (leave out AccumulateGrad; count every op "
                       "on a path from y to an input that requires grad)")
    before = _dependencies(program)
    for i, name in enumerate(got):
        if not before[name] <= set(got[:i]):
            return False, f"{name} comes before a rule that feeds it its gradient: backward starts at y"
    return True, ""


def _reads_entry(program: str, got: object) -> tuple[bool, str]:
    diff = dict_diff(got, observed(program)["reads"], lambda answer, truth: as_set(answer) == truth)
    if diff is None:
        return False, "give a dict {node name: set of slots}"
    missing, extra, wrong = diff
    if missing or extra:
        return False, "the dict should have one entry per reverse rule (the rules of q1)"
    if wrong:
        return False, (f"look again at what {', '.join(wrong)} read"
                       " (which inputs require grad decides what a rule needs)")
    return True, ""


def _same_step(answer: object, truth: object) -> bool:
    return answer == truth and (answer is None) == (truth is None) and type(answer) is not bool


def _freed_entry(program: str, got: object) -> tuple[bool, str]:
    if isinstance(got, dict):  # any valid order of independent rules gives free steps that are accepted
        stripped = {k.strip(): v for k, v in got.items() if isinstance(k, str)}
        for order in valid_orders(program):
            truth = freed_under(program, order)
            if set(stripped) == set(truth) and all(_same_step(stripped[k], truth[k]) for k in truth):
                return True, ""
    diff = dict_diff(got, observed(program)["freed"], _same_step)
    if diff is None:
        return False, "give a dict {'Node.slot': step or None}"
    missing, extra, wrong = diff
    if missing or extra:
        what = []
        if missing:
            what.append(f"{len(missing)} residual(s) missing")
        if extra:
            what.append(f"{', '.join(sorted(extra))} is not saved by this program")
        return False, "; ".join(what)
    if wrong:
        return False, (f"the free point of {', '.join(wrong)} is off: memory goes when the last holder lets go "
                       "(another rule saving the same storage, or you holding the tensor)")
    return True, ""


JUDGES = {"q1": by_table(_order_entry), "q2": by_table(_reads_entry), "q3": by_table(_freed_entry)}
