"""What an exercise is: questions whose truth is computed from the runtime at check time.

A question is three functions:
- `draw(rng)`: the inputs for this check, drawn now (JSON);
- `probe(answer, inputs)`: runs where the student's answer lives (their kernel, or the
  grading sandbox) and returns raw observations as JSON — never a verdict;
- `judge(observation, inputs)`: runs in the trusted process, computes the truth with
  PyTorch and tracekit, and returns (fraction of the points, a message that says what was
  expected in words, never the answer itself).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON_TYPES = (bool, int, float, str, type(None))


class AnswerError(Exception):
    """The answer cannot be checked (missing, wrong kind, raised): the message says what to do."""


def plain(value: Any, depth: int = 0) -> Any:
    """The answer as plain JSON data; anything else (custom classes, tensors, objects with a
    clever __eq__) is refused, so the trusted side only ever compares plain values."""
    if depth > 20:
        raise AnswerError("the answer is nested too deeply")
    if type(value) in JSON_TYPES:
        return value
    if type(value) in (list, tuple):
        return [plain(v, depth + 1) for v in value]
    if type(value) is dict:
        if not all(type(k) is str for k in value):
            raise AnswerError("dictionary keys must be strings")
        return {k: plain(v, depth + 1) for k, v in value.items()}
    raise AnswerError(f"expected a number, string, list or dict, got {type(value).__name__}")


def value_probe(answer: Any, inputs: dict) -> dict:
    """Probe for a data answer: the value itself, as plain JSON."""
    return {"value": plain(answer)}


def no_inputs(rng: random.Random) -> dict:
    """For questions about a fixed program: nothing to draw."""
    return {}


@dataclass(frozen=True)
class Question:
    """One graded question."""

    name: str
    points: int
    prompt: str
    answer: str  # the notebook variable (or function / class) that holds the answer
    judge: Callable[[dict, dict], tuple[float, str]]
    probe: Callable[[Any, dict], dict] = value_probe
    draw: Callable[[random.Random], dict] = no_inputs
    kind: str = "data"  # data or code


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: an id (ex01 ...), the lesson it belongs to, its questions."""

    id: str
    title: str
    lesson: str
    questions: tuple[Question, ...] = field(default_factory=tuple)

    @property
    def max_score(self) -> int:
        """Total points."""
        return sum(q.points for q in self.questions)


def equal_judge(truth: Callable[[dict], Any], expected: str) -> Callable[[dict, dict], tuple[float, str]]:
    """A judge that compares a data answer with the truth computed now; `expected` says what
    kind of answer was wanted, in words."""

    def judge(observation: dict, inputs: dict) -> tuple[float, str]:
        value = observation.get("value")
        if value is None:
            return 0.0, f"no answer yet: {expected}"
        if _normalise(value) == _normalise(plain(truth(inputs))):
            return 1.0, "correct"
        return 0.0, f"not what the runtime shows: {expected}"

    return judge


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k.strip(): _normalise(v) for k, v in value.items()}
    return value


def parts(*checks: tuple[bool, str]) -> tuple[float, str]:
    """Equal shares of the points for each (passed, what to fix) check, and the fixes still needed."""
    fixes = [fix for ok, fix in checks if not ok]
    return (len(checks) - len(fixes)) / len(checks), "correct" if not fixes else "; ".join(fixes)


def close(a: list[float], b: list[float], tol: float = 1e-6) -> bool:
    """Element-wise |a − b| ≤ tol·(1 + |b|), same length."""
    return len(a) == len(b) and all(abs(x - y) <= tol * (1 + abs(y)) for x, y in zip(a, b))
