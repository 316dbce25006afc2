"""Write the sealed key of the self-check (`tracekit/exercises/selfcheck_key.json`) from the judges.

Instructor side: it computes every truth here and keeps only what `sealed.py` needs to say right or
wrong on the self-check's fixed inputs: salted digests of each accepted answer of a table case or of
an exact value, floating-point figures at the self-check's points, the reference's memory figure.
`python solutions/build.py` calls `build_key` with the reference solutions (tests/test_sealed.py checks them
against it).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import torch

from .. import IDS, draw_inputs, get, measure_one, probe_one
from ..sealed import canonical, seal, sealed_figures
from . import ex01, ex02, ex04, ex05, ex07, ex09

SELF_SEED = 20261201  # the self-check's inputs in a student install (the grade draws per submission)


def _steps(program: str) -> list[dict]:
    found = [ex02.freed_under(program, order) for order in ex02.valid_orders(program)]
    return found + [ex02.observed(program)["freed"]]


# a table question: (shape of an entry, every accepted answer of a case, what to look at when wrong)
TABLES: dict[tuple[str, str], tuple[str, Callable[[str], list[Any]], str]] = {
    ("ex01", "q1"): ("set", lambda c: [sorted(ex01.slots_binary(c))], "which values a rule needs depends on "
                     "which inputs require grad"),
    ("ex01", "q2"): ("set", lambda c: [sorted(ex01.slots_unary(c))], "does the rule need its input, its output, "
                     "or neither?"),
    ("ex02", "q1"): ("list", ex02.valid_orders, "backward starts at y; a rule runs once its consumers have"),
    ("ex02", "q2"): ("sets", lambda p: [{k: sorted(v) for k, v in ex02.observed(p)["reads"].items()}],
                     "one entry per reverse rule, the slots it reads"),
    ("ex02", "q3"): ("steps", _steps, "memory goes when the last holder lets go"),
    ("ex04", "q1"): ("set", lambda p: [sorted(ex04.needs(p))], "which saved values a second backward needs"),
    ("ex05", "q2"): ("ints", lambda p: [ex05.versions(p)], "[saved, now]: count the writes that bump h's counter"),
    ("ex07", "q1"): ("int", lambda p: [ex07.pack_calls(p)], "count the tensors the rules save"),
    ("ex09", "q1"): ("word", lambda c: [ex09.ranking(c)[0][0]], "the largest category at the peak"),
}
# a function whose results are exact numbers, one per drawn case: digests of each
VALUES = {("ex03", "q1"): ("whole", "which allocation the saved slice pins, and one element's size"),
          ("ex03", "q2"): ("wholes", "[visible, pinned]: views of one tensor share one allocation"),
          ("ex09", "q2"): ("whole", "two moments per parameter element, a step count per tensor")}
# the rest: figures of the reference's observation (keys not compared: what differs between right answers;
# values under SEALED_KEYS are an answer of a fixed case, kept as a digest)
SEALED_KEYS = {"ex10": frozenset({"saved"})}
FIGURES = {("ex01", "q3"): (["saved", "on_ctx", "backward_raised"], "σ(x) forward, grad·σ·(1−σ) backward"),
           ("ex04", "q2"): ([], "f''(x) in x's dtype, the same on a second call"),
           ("ex05", "q1"): (["backward_by"], "a.grad through a real backward, and the program's results"),
           ("ex06", "q1"): ([], "one value per step, SGD as the prompt says"),
           ("ex07", "q2"): ([], "every unpack returns its own pack's tensor, with many graphs alive"),
           ("ex10", "q1"): ([], "values and gradients as PyTorch's, saving what PyTorch saves"),
           ("ex10", "q2"): ([], "values and gradients as PyTorch's, saving what PyTorch saves"),
           ("ex10", "q3"): ([], "values and gradients as PyTorch's, saving what PyTorch saves")}
MEMORY_HINT = {"ex06": "keep no graph of a diagnostic from one step to the next",
               "ex07": "let an entry go when its handle is dropped; keep t.detach(), not t"}


def _namespace(solutions: dict[str, str], exercise_id: str) -> dict[str, Any]:
    import tracekit

    ns: dict[str, Any] = {"torch": torch, "tk": tracekit}
    for q in get(exercise_id).questions:
        exec(solutions[q.name], ns)  # noqa: S102 - the reference solutions
    return ns


def exercise_key(exercise_id: str, solutions: dict[str, str], salt: str) -> dict[str, Any]:
    """The sealed key of one exercise, built from the judges and checked against its reference solution."""
    exercise = get(exercise_id)
    drawn = draw_inputs(exercise, SELF_SEED)
    inputs = {q.name: q.self_check(drawn[q.name]) if q.self_check else drawn[q.name] for q in exercise.questions}
    ns = _namespace(solutions, exercise_id)
    questions: dict[str, Any] = {}
    for q in exercise.questions:
        where = f"{exercise_id}\0{q.name}"
        if (exercise_id, q.name) in TABLES:
            shape, accepted, hint = TABLES[exercise_id, q.name]
            cases = {c: sorted({seal(salt, f"{where}\0{c}", canonical(shape, a)) for a in accepted(c)})
                     for c in inputs[q.name]["cases"]}
            questions[q.name] = {"kind": "table", "shape": shape, "hint": hint, "cases": cases}
            continue
        obs = probe_one(q, ns, inputs[q.name])
        if exercise_id == "ex08":
            questions[q.name] = {"kind": "plan"}
        elif (exercise_id, q.name) in VALUES:
            shape, hint = VALUES[exercise_id, q.name]
            questions[q.name] = {"kind": "values", "shape": shape, "hint": hint, "cases": [
                [seal(salt, f"{where}\0{i}", canonical(shape, v))] for i, v in enumerate(obs["values"])]}
        else:
            ignore, hint = FIGURES[exercise_id, q.name]
            keys = SEALED_KEYS.get(exercise_id, frozenset())
            expect = sealed_figures(obs, keys, lambda t, w=where: seal(salt, w, t))
            spec: dict[str, Any] = {"kind": "figures", "expect": expect, "ignore": ignore, "hint": hint}
            if (exercise_id, q.name) == ("ex01", "q3"):
                spec["one_saved"] = True  # what is saved is judged by its structure, not by a figure
            if q.measure is not None:
                config = inputs[q.name]["measure"]["self"]
                judges = __import__(f"tracekit.exercises.judges.{exercise_id}", fromlist=["SELF_SLACK"])
                spec["memory"] = {"share": 0.5 if exercise_id == "ex07" else 1.0, "slack": judges.SELF_SLACK,
                                  "expect": measure_one(q, ns, config)["values"], "hint": MEMORY_HINT[exercise_id],
                                  "reference_peak": judges.reference_watch_peak(q.name,
                                                                                json.dumps(config, sort_keys=True))}
            questions[q.name] = spec
    return {"seed": SELF_SEED, "salt": salt, "questions": questions}


def build_key(solutions: dict[str, dict[str, str]], salt: str | None = None) -> dict[str, Any]:
    """The sealed key of every exercise (a new salt unless one is given)."""
    salt = salt or secrets.token_hex(16)
    return {e: exercise_key(e, solutions[e], salt) for e in IDS}
