"""Helpers the judges share: partial credit, closeness, set and table comparison."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def parts(*checks: tuple[bool, str]) -> tuple[float, str]:
    """Equal shares of the points for each (passed, what to fix) check, and the fixes still needed."""
    fixes = [fix for ok, fix in checks if not ok]
    return (len(checks) - len(fixes)) / len(checks), "correct" if not fixes else "; ".join(fixes)


def close(a: Any, b: list[float], tol: float = 1e-6) -> bool:
    """Element-wise |a − b| ≤ tol·(1 + |b|), same length; False for anything that is not a list of numbers."""
    if not isinstance(a, list) or len(a) != len(b):
        return False
    if not all(type(x) in (int, float) for x in a):
        return False
    return all(abs(x - y) <= tol * (1 + abs(y)) for x, y in zip(a, b))


def normalise(value: Any) -> Any:
    """Strip strings (recursively) so ' result' and 'result' compare equal."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, dict):
        return {k.strip(): normalise(v) for k, v in value.items()}
    return value


def as_set(value: Any) -> frozenset | None:
    """A list / single string answer as a set of stripped strings (None if it is not one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return frozenset(v.strip() for v in value)


def table(observation: dict, inputs: dict, entry: Callable[[str, Any], tuple[bool, str]]) -> tuple[float, str]:
    """Score a table answer on the cases this check drew: `entry(case, answer)` says whether one
    case is right and, if not, what to look at; the message names each wrong case."""
    answers = observation.get("value")
    if not isinstance(answers, dict):
        return 0.0, "expected a dict with one entry per case"
    fixes = []
    for case in inputs["cases"]:
        got = answers.get(case)
        if case not in answers:
            fixes.append(f"{case!r}: no entry (this check drew it; fill in every case)")
            continue
        ok, hint = entry(case, got)
        if not ok:
            fixes.append(f"{case!r}: {hint}")
    n = len(inputs["cases"])
    return (n - len(fixes)) / n, "correct" if not fixes else "; ".join(fixes)
