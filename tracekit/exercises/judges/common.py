"""Helpers the judges share: partial credit, closeness, set, dict and table comparison."""

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


def as_set(value: Any) -> frozenset | None:
    """A list / single string answer as a set of stripped strings, None as the empty set (None if
    it is not one of those)."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return frozenset(v.strip() for v in value)


Entry = Callable[[Any, Any], tuple[bool, str]]  # (case, answer) -> (right?, what to look at)
Judge = Callable[[dict, dict], tuple[float, str]]  # (observation, inputs) -> (fraction, message)


def table(observation: dict, inputs: dict, entry: Entry) -> tuple[float, str, list[str]]:
    """Score a table answer on every case: `entry(case, answer)` says whether one case is right and,
    if not, what to look at. The message names each wrong case once (cases with the same hint
    together); the third value lists the wrong cases."""
    answers = observation.get("value")
    if not isinstance(answers, dict):
        return 0.0, "expected a dict with one entry per case", []
    answers = {k.strip(): v for k, v in answers.items()}
    hints: dict[str, list[str]] = {}
    cases = list(inputs["cases"])
    for case in cases:
        if case not in answers:
            ok, hint = False, "no entry (fill in every case)"
        else:
            ok, hint = entry(case, answers[case])
        if not ok:
            hints.setdefault(hint, []).append(case)
    wrong = [c for group in hints.values() for c in group]
    if not wrong:
        return 1.0, "correct", []
    message = "; ".join(f"{', '.join(map(repr, group))}: {hint}" for hint, group in hints.items())
    return (len(cases) - len(wrong)) / len(cases), message, wrong


def by_table(entry: Entry) -> Callable[[dict, dict], tuple[float, str, list[str]]]:
    """The judge of a table question whose cases are scored by `entry` (see `table`)."""
    return lambda observation, inputs: table(observation, inputs, entry)


def case_list(observation: dict, key: str, inputs: dict) -> list | None:
    """The observation's list under `key`, one item per drawn case (None if it is not that)."""
    items = observation.get(key)
    return items if isinstance(items, list) and len(items) == len(inputs["cases"]) else None


def drawn_message(fixes: list[str], total: int) -> str:
    """What was wrong on a submission's drawn cases, grouped by what to fix, with how many cases each
    fix concerns: never the drawn inputs themselves (a resubmission draws new ones, and a message that
    lists them would hand out a lookup table)."""
    if not fixes:
        return "correct"
    counts: dict[str, int] = {}
    for fix in fixes:
        counts[fix] = counts.get(fix, 0) + 1
    return "; ".join(f"{fix} ({n} of the {total} drawn cases)" for fix, n in counts.items())


def each_value(observation: dict, inputs: dict, source: str, entry: Entry) -> tuple[float, str]:
    """Score a function's values, one per drawn case ({"values": [...]}): `entry(case, value)`
    says whether it is right and, if not, what to fix (the message counts the cases, see `drawn_message`)."""
    values = case_list(observation, "values", inputs)
    if values is None:
        return 0.0, f"the checker got no values from {source}"
    verdicts = [entry(case, got) for got, case in zip(values, inputs["cases"])]
    fixes = [fix for ok, fix in verdicts if not ok]
    return (len(verdicts) - len(fixes)) / len(verdicts), drawn_message(fixes, len(verdicts))


def set_entry(truth_of: Callable[[Any], frozenset], what: str, extra: str, missing: str, both: str = "") -> Entry:
    """An entry for a set answer (see `as_set`) against the set `truth_of(case)`: the hint says
    whether a named item is `extra`, a true one `missing`, or (if `both` is given) both."""

    def entry(case: Any, got: Any) -> tuple[bool, str]:
        got_set = as_set(got)
        if got_set is None:
            return False, f"give a set of {what}"
        truth = truth_of(case)
        if got_set == truth:
            return True, ""
        if both and got_set - truth and truth - got_set:
            return False, both
        return False, extra if got_set - truth else missing

    return entry


def dict_diff(got: Any, truth: dict, same: Callable[[Any, Any], bool]) -> tuple[set, set, list] | None:
    """A dict answer (keys stripped) against the truth: (keys missing, keys extra, keys whose value
    is not `same` as the truth's, sorted); None if the answer is not a dict."""
    if not isinstance(got, dict):
        return None
    got = {k.strip(): v for k, v in got.items()}
    missing, extra = set(truth) - set(got), set(got) - set(truth)
    return missing, extra, sorted(k for k in truth if k in got and not same(got[k], truth[k]))
