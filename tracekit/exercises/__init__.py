"""Graded exercises: `tk.check("ex03")` checks your answers in this notebook."""

from __future__ import annotations

import importlib
import random
import sys
from typing import Any

from .base import AnswerError, Exercise, Question

IDS = tuple(f"ex{i:02d}" for i in range(1, 10))


def get(exercise_id: str) -> Exercise:
    """The exercise with this id (ex01 ... ex09)."""
    if exercise_id not in IDS:
        raise KeyError(f"no exercise {exercise_id!r}: choose one of {', '.join(IDS)}")
    return importlib.import_module(f".{exercise_id}", __name__).EXERCISE


def probe_all(exercise: Exercise, namespace: dict[str, Any], inputs: dict[str, dict]) -> dict[str, dict]:
    """Run every question's probe on the answers found in `namespace` (where the answers live)."""
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
            out[q.name] = {"error": str(err)}
        except NotImplementedError:
            out[q.name] = {"missing": f"`{q.answer}` is not implemented yet"}
        except Exception as err:  # noqa: BLE001 - a student's answer may raise anything
            out[q.name] = {"error": f"{type(err).__name__}: {err}"}
    return out


def judge_all(exercise: Exercise, observations: dict[str, dict], inputs: dict[str, dict]) -> list[dict]:
    """Grade observations against the truth computed now: one entry per question."""
    results = []
    for q in exercise.questions:
        obs = observations.get(q.name) or {"missing": "no answer was found"}
        if "missing" in obs or "error" in obs:
            fraction, message = 0.0, obs.get("missing") or f"your answer raised: {obs['error']}"
        else:
            try:
                fraction, message = q.judge(obs, inputs[q.name])
            except Exception as err:  # noqa: BLE001 - malformed observations score zero
                fraction, message = 0.0, f"the answer could not be checked ({type(err).__name__})"
        score = round(q.points * max(0.0, min(1.0, fraction)), 2)
        results.append({"name": q.name, "prompt": q.prompt, "score": score, "max_score": q.points,
                        "message": message})
    return results


def draw_inputs(exercise: Exercise, seed: int | None = None) -> dict[str, dict]:
    """Inputs for every question, drawn now (from the OS's randomness unless a seed is given)."""
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    return {q.name: q.draw(rng) for q in exercise.questions}


def check(exercise_id: str, namespace: dict[str, Any] | None = None) -> list[dict]:
    """Self-check the answers in this notebook: which questions pass, points, and what to fix."""
    exercise = get(exercise_id)
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    inputs = draw_inputs(exercise)
    results = judge_all(exercise, probe_all(exercise, namespace, inputs), inputs)
    total = sum(r["score"] for r in results)
    print(f"{exercise.id} · {exercise.title}: {total:g} / {exercise.max_score} points")
    for r in results:
        mark = "✓" if r["score"] == r["max_score"] else ("~" if r["score"] else "✗")
        print(f"  {mark} {r['name']} ({r['score']:g}/{r['max_score']}) {r['prompt']}")
        if r["score"] < r["max_score"]:
            print(f"      {r['message']}")
    return results


__all__ = ["IDS", "AnswerError", "Exercise", "Question", "check", "draw_inputs", "get", "judge_all", "probe_all"]
