"""Graded exercises: `tk.check("ex03")` checks your answers in this notebook.

Probe side (this module, `base`, `ex01` ...): draws nothing secret and computes no truth; it
runs the student's answers and returns raw JSON observations. Trusted side (`judges/`,
imported lazily by `judge_all`): computes the truth now and scores the observations.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import re
import sys
from typing import Any

from .base import AnswerError, AnswerRaised, Exercise, Question

IDS = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"ex\d\d", m.name)))

# what a judged question's "status" can be (tests assert on it; "checker_error" is our bug)
STATUSES = ("correct", "partial", "wrong", "missing", "answer_raised", "checker_error")


def get(exercise_id: str) -> Exercise:
    """The exercise with this id (ex01, ex02, ...)."""
    if exercise_id not in IDS:
        raise KeyError(f"no exercise {exercise_id!r}: choose one of {', '.join(IDS)}")
    return importlib.import_module(f".{exercise_id}", __name__).EXERCISE


def probe_all(exercise: Exercise, namespace: dict[str, Any], inputs: dict[str, dict]) -> dict[str, dict]:
    """Run every question's probe on the answers found in `namespace` (where the answers live).

    Each observation is the probe's JSON, or one of {"missing": why}, {"error": what the
    student's code raised or why the answer cannot be read}, {"checker_error": what failed
    in the checker itself}."""
    out: dict[str, dict] = {}
    for q in exercise.questions:
        if q.answer not in namespace:
            out[q.name] = {"missing": f"define `{q.answer}`"}
            continue
        answer = namespace[q.answer]
        if q.kind == "data" and answer is None:
            out[q.name] = {"missing": f"set `{q.answer}` to your answer"}
            continue
        try:
            out[q.name] = q.probe(answer, inputs[q.name])
        except AnswerError as err:
            out[q.name] = {"error": str(err), "raised": False}
        except AnswerRaised as err:
            if isinstance(err.original, NotImplementedError):
                out[q.name] = {"missing": f"`{q.answer}` is not implemented yet"}
            else:
                out[q.name] = {"error": str(err), "raised": True}
        except Exception as err:  # noqa: BLE001 - a bug of the probe, reported as such
            out[q.name] = {"checker_error": f"{type(err).__name__}: {err}"}
    return out


def _judge(exercise_id: str, name: str) -> Any:
    return importlib.import_module(f".judges.{exercise_id}", __name__).JUDGES[name]


def judge_all(exercise: Exercise, observations: dict[str, dict], inputs: dict[str, dict]) -> list[dict]:
    """Grade observations against the truth computed now: one entry per question, each with a
    `status` (see STATUSES) besides score, max_score and message."""
    results = []
    for q in exercise.questions:
        obs = observations.get(q.name)
        if not isinstance(obs, dict):
            obs = {"missing": "no answer was found"}
        if "missing" in obs:
            fraction, message, status = 0.0, str(obs["missing"]), "missing"
        elif "error" in obs:
            raised = obs.get("raised", True)
            fraction, status = 0.0, "answer_raised" if raised else "wrong"
            message = f"your answer raised {obs['error']}" if raised else f"{obs['error']}"
        elif "checker_error" in obs:
            fraction, status = 0.0, "checker_error"
            message = f"the checker could not run your answer ({obs['checker_error']}): please report this"
        else:
            try:
                fraction, message = _judge(exercise.id, q.name)(obs, inputs[q.name])
                fraction = max(0.0, min(1.0, float(fraction)))
                status = "correct" if fraction == 1 else ("partial" if fraction > 0 else "wrong")
            except Exception as err:  # noqa: BLE001 - reported, never blamed on the student
                fraction, status = 0.0, "checker_error"
                message = f"the checker could not check this answer ({type(err).__name__}: {err}): please report this"
        score = round(q.points * fraction, 2)
        results.append({"name": q.name, "prompt": q.prompt, "score": score, "max_score": q.points,
                        "message": message, "status": status})
    return results


def draw_inputs(exercise: Exercise, seed: int | None = None) -> dict[str, dict]:
    """Inputs for every question, drawn now (from the OS's randomness unless a seed is given)."""
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    return {q.name: q.draw(rng) for q in exercise.questions}


def check(exercise_id: str, namespace: dict[str, Any] | None = None, seed: int | None = None) -> list[dict]:
    """Self-check the answers in this notebook: which questions pass, points, and what to fix."""
    exercise = get(exercise_id)
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    inputs = draw_inputs(exercise, seed)
    results = judge_all(exercise, probe_all(exercise, namespace, inputs), inputs)
    from .report import CheckReport, deliver  # one report: the notebook shows the value, a script prints it

    return deliver(CheckReport(exercise.id, exercise.title, exercise.max_score, results))


def score_text(exercise_id: str, title: str, score: float, max_score: float, questions: list[dict]) -> str:
    """The score as text: the total, then per question ✓ (full), ~ (partial) or ✗ (none), its points
    and prompt, and under it the judge's message unless that is a plain "correct"."""
    lines = [f"{exercise_id} · {title}: {score:g} / {max_score} points"]
    for q in questions:
        mark = "✓" if q["score"] == q["max_score"] else ("~" if q["score"] else "✗")
        lines.append(f"  {mark} {q['name']} ({q['score']:g}/{q['max_score']}) {q['prompt']}")
        if q["score"] < q["max_score"] or q["message"] != "correct":
            lines.append(f"      {q['message']}")
    return "\n".join(lines)


__all__ = ["IDS", "STATUSES", "AnswerError", "AnswerRaised", "Exercise", "Question", "check", "draw_inputs",
           "get", "judge_all", "probe_all", "score_text"]
