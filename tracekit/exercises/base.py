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

import numbers
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import torch

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


def number_value(value: Any) -> Any:
    """A number of a standard kind as a Python int or float (numpy scalars, 0-dim tensors and
    arrays where unambiguous); None when it is not one."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dim() != 0 or value.requires_grad:
            return None
        value = value.item()
    elif hasattr(value, "shape") and hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()  # a numpy 0-dim array or scalar
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def plain(value: Any, depth: int = 0) -> Any:
    """The answer as plain JSON data: strings, bools and None as they are; numbers of any standard
    kind (numpy scalars, 0-dim tensors) as int / float; any Mapping as a dict (string keys); any
    set (set, frozenset, a Set) as a sorted list; lists, tuples and other sequences as lists.
    Anything else (custom classes, objects with a clever __eq__) is refused, so the trusted side
    only ever compares plain values."""
    if depth > 20:
        raise AnswerError("the answer is nested too deeply")
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    number = number_value(value)
    if number is not None:
        if isinstance(number, float) and number != number:
            raise AnswerError("the answer holds NaN")
        return number
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, Mapping):
        out = {}
        for k in list(value.keys()):
            if not isinstance(k, str):
                raise AnswerError("dictionary keys must be strings")
            out[str.__str__(k)] = plain(value[k], depth + 1)
        return out
    if isinstance(value, AbstractSet):
        return sorted((plain(v, depth + 1) for v in value), key=repr)
    if isinstance(value, list | tuple) or (isinstance(value, Sequence) and not isinstance(value, bytes | bytearray)):
        return [plain(v, depth + 1) for v in list(value)]
    if isinstance(value, torch.Tensor):
        raise AnswerError("expected plain values, got a tensor (use .item() or .tolist())")
    raise AnswerError(f"expected a number, string, set, list or dict, got {type(value).__name__}")


def value_probe(answer: Any, inputs: dict) -> dict:
    """Probe for a data answer: the value itself, as plain JSON."""
    return {"value": plain(answer)}


def expect_function(answer: Any, signature: str = "") -> None:
    """Refuse an answer that is not a function (the message names the function to define)."""
    if not callable(answer):
        raise AnswerError(f"define a function {signature}".rstrip())


def values_probe(signature: str, call: Callable[[Callable[..., Any], dict], Any],
                 read: Callable[[Any], Any]) -> Callable[[Any, dict], dict]:
    """Probe for a function answer checked on each drawn case: `call(fn, case)` runs it (through
    `student`), `read` turns what it returned into plain JSON or refuses it; {"values": [...]}."""

    def probe(fn: Any, inputs: dict) -> dict:
        expect_function(fn, signature)
        return {"values": [read(call(fn, case)) for case in inputs["cases"]]}

    return probe


def tensor_of(case: dict, values: list) -> torch.Tensor:
    """Drawn values as a tensor of the case's dtype (a name, e.g. "float32") and shape."""
    return torch.tensor(values, dtype=getattr(torch, case["dtype"])).reshape(case["shape"])


def dtype_name(t: torch.Tensor) -> str:
    """A tensor's dtype as the drawn inputs write it ("float32", not "torch.float32")."""
    return str(t.dtype).replace("torch.", "")


def no_inputs(rng: random.Random) -> dict:
    """For questions about a fixed program: nothing to draw."""
    return {}


def all_cases(family: list[str]) -> Callable[[random.Random], dict]:
    """The cases of a table question: every case of its family, every check (nothing is drawn)."""

    def draw(rng: random.Random) -> dict:
        return {"cases": list(family)}

    return draw


NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def md_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """A markdown table (for the prompts): a header row, then one row per item."""
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def programs_table(programs: dict[str, tuple[str, str]], who: dict[str, str], column: str = "y =",
                   prefix: str = "") -> str:
    """The markdown table of a family of programs {id: (source, which inputs require grad)}."""
    return md_table(["id", column, "requires grad"],
                    [(f"`{k}`", f"`{prefix}{src}`", who[w]) for k, (src, w) in programs.items()])


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
    stub: str = ""  # the code cell a student starts from (default: `<answer> = None  # your answer`)
    # a workload whose memory is the criterion: measure(answer, config) -> plain values; the grader runs
    # it in a sandbox of its own and reads the memory from the kernel (inputs[...]["measure"] has the
    # configs: "grade" for the grader's sandbox, "self" for the smaller self-check)
    measure: Callable[[Any, dict], Any] | None = None
    # the inputs the student's self-check runs on, made from the drawn ones (the same property at a size that
    # fits a student's kernel next to a lesson); None: the drawn inputs themselves
    self_check: Callable[[dict], dict] | None = None

    @property
    def starter(self) -> str:
        """The answer cell of the student notebook: the stub, or a placeholder for a data answer."""
        return self.stub or f"{self.answer} = None  # your answer"


def cases_question(name: str, points: int, prompt: str, answer: str, family: Iterable[str], details: str,
                   see: str = "", keyed_by: str | None = "program") -> Question:
    """A data question answered as a table {case: answer} over a family of cases, every case checked;
    unless `keyed_by` is None the prompt says so ("Answer as a dict keyed by program id."), then `see`."""
    if keyed_by is not None:
        details += f" Answer as a dict (any mapping) keyed by {keyed_by} id, with an entry for every {keyed_by}."
    return Question(name, points, prompt, answer, draw=all_cases(list(family)),
                    details=details + (f" {see}" if see else ""))


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: an id (ex01 ...), the lesson it belongs to, its questions."""

    id: str
    title: str
    lesson: str
    questions: tuple[Question, ...] = field(default_factory=tuple)
    intro: str = ""  # markdown shown at the top of the notebook
    topic: str = ""  # the notebook's name after the id (default: the lesson's, without its number)

    @property
    def notebook(self) -> str:
        """The file name (no suffix) of its notebooks, in exercises/ and solutions/: ex01_forward_values."""
        return f"{self.id}_{self.topic or self.lesson.split('_', 1)[1]}"

    @property
    def max_score(self) -> int:
        """Total points."""
        return sum(q.points for q in self.questions)


def lesson_link(lesson: str, section: str = "") -> str:
    """A markdown link to a lesson notebook (from exercises/), optionally naming a section."""
    where = f", section “{section}”" if section else ""
    return f"[lesson `{lesson}`](../notebooks/{lesson}.ipynb){where}"
