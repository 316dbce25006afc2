"""What an exercise is: questions whose truth is computed from the runtime at check time.

A question is three functions:
- `draw(rng)`: the inputs for this check, drawn now (JSON);
- `probe(answer, inputs)`: runs where the student's answer lives (their kernel, or the
  grading sandbox) and returns raw observations as JSON — never a verdict, never the truth;
- a judge, in `tracekit.exercises.judges.<exercise id>` (`JUDGES[question name]`): runs in the
  trusted process, computes the truth with PyTorch and tracekit, and returns (fraction of the
  points, a message that says what to look at, in words, never the answer itself).

This module and the exercise modules (`ex01.py` ...) are the probe side: they import nothing
from `judges`, so the grading sandbox can hide that folder and still run every probe.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import AnswerError

JSON_TYPES = (bool, int, float, str, type(None))


class AnswerRaised(Exception):
    """The student's own code raised while the probe ran it (the original is the cause)."""

    def __init__(self, err: BaseException) -> None:
        super().__init__(f"{type(err).__name__}: {err}")
        self.original = err


def student(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the student's code: whatever it raises is reported as the answer raising, never as
    a failure of the checker."""
    try:
        return fn(*args, **kwargs)
    except (AnswerError, AnswerRaised):
        raise
    except Exception as err:  # noqa: BLE001 - a student's answer may raise anything
        raise AnswerRaised(err) from err


def plain(value: Any, depth: int = 0) -> Any:
    """The answer as plain JSON data; anything else (custom classes, tensors, objects with a
    clever __eq__) is refused, so the trusted side only ever compares plain values. Sets and
    frozensets of plain values become sorted lists (the judge compares them as sets)."""
    if depth > 20:
        raise AnswerError("the answer is nested too deeply")
    if type(value) in JSON_TYPES:
        return value
    if type(value) in (list, tuple):
        return [plain(v, depth + 1) for v in value]
    if type(value) in (set, frozenset):
        items = [plain(v, depth + 1) for v in value]
        return sorted(items, key=repr)
    if type(value) is dict:
        if not all(type(k) is str for k in value):
            raise AnswerError("dictionary keys must be strings")
        return {k: plain(v, depth + 1) for k, v in value.items()}
    raise AnswerError(f"expected a number, string, list or dict, got {type(value).__name__}")


def value_probe(answer: Any, inputs: dict) -> dict:
    """Probe for a data answer: the value itself, as plain JSON."""
    return {"value": plain(answer)}


def cases_probe(answer: Any, inputs: dict) -> dict:
    """Probe for a table answer ({case: value}): only the entries this check drew, as plain JSON."""
    if type(answer) is not dict:
        raise AnswerError(f"expected a dict {{case: answer}}, got {type(answer).__name__}")
    return {"value": {case: plain(answer[case]) if case in answer else {"missing": True}
                      for case in inputs["cases"] if type(case) is str}}


def no_inputs(rng: random.Random) -> dict:
    """For questions about a fixed program: nothing to draw."""
    return {}


def draw_cases(family: list[str], k: int) -> Callable[[random.Random], dict]:
    """A draw that picks k cases of a family (a table answer is checked on those)."""

    def draw(rng: random.Random) -> dict:
        return {"cases": rng.sample(family, k)}

    return draw


@dataclass(frozen=True)
class Question:
    """One graded question (its judge lives in `tracekit.exercises.judges`)."""

    name: str
    points: int
    prompt: str
    answer: str  # the notebook variable (or function / class) that holds the answer
    probe: Callable[[Any, dict], dict] = value_probe
    draw: Callable[[random.Random], dict] = no_inputs
    kind: str = "data"  # data or code
    details: str = ""  # the full prompt for the notebook (markdown): what to return, dtypes, links


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: an id (ex01 ...), the lesson it belongs to, its questions."""

    id: str
    title: str
    lesson: str
    questions: tuple[Question, ...] = field(default_factory=tuple)
    intro: str = ""  # markdown shown at the top of the notebook

    @property
    def max_score(self) -> int:
        """Total points."""
        return sum(q.points for q in self.questions)


def lesson_link(lesson: str, section: str = "") -> str:
    """A markdown link to a lesson notebook (from exercises/), optionally naming a section."""
    where = f", section “{section}”" if section else ""
    return f"[lesson `{lesson}`](../notebooks/{lesson}.ipynb){where}"
