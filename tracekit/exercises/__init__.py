"""Graded exercises: `tk.check("ex03")` checks your answers in this notebook.

Probe side (this module, `base`, `ex01` ...): draws nothing secret and computes no truth; it
runs the student's answers and returns raw JSON observations (in the grader, inside the
student's sandbox, where nothing it says is trusted). Trusted side (`judges/`, imported lazily
by `judge_all`): computes the truth now and scores the observations; where a criterion is how
the answer runs (memory), it reads a measurement taken outside the answer's process.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import random
import re
import secrets
import sys
from typing import Any

from ..errors import JudgesMissingError, UnknownExerciseError
from . import sealed
from .base import AnswerError, AnswerRaised, Exercise, Question

IDS = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"ex\d\d", m.name)))

# what a judged question's "status" can be (tests assert on it; "checker_error" is our bug)
STATUSES = ("correct", "partial", "wrong", "missing", "answer_raised", "checker_error")
SELF_CHECK_NOTE = ("This self-check ran in your kernel; the instructor's grade runs this notebook again from the "
                   "top in a fresh sandbox, checks every case, and measures memory outside your process.")


def canonical_id(name: object) -> str:
    """The exercise id `name` means: "ex03", "EX03", " ex3 " -> "ex03"; else an UnknownExerciseError naming them."""
    found = re.fullmatch(r"\s*ex(\d{1,2})\s*", name, re.IGNORECASE) if isinstance(name, str) else None
    canonical = f"ex{int(found.group(1)):02d}" if found else None
    if canonical not in IDS:
        raise UnknownExerciseError(f"no exercise {name!r}: the exercises are {', '.join(IDS)} "
                                   f"(e.g. tk.check(\"{IDS[0]}\"))")
    return canonical


def get(exercise_id: str) -> Exercise:
    """The exercise with this id (ex01, ex02, ...; any case)."""
    return importlib.import_module(f".{canonical_id(exercise_id)}", __name__).EXERCISE


def probe_one(q: Question, namespace: dict[str, Any], inputs: dict) -> dict:
    """Run one question's probe on the answer found in `namespace`: the probe's JSON, or one of
    {"missing": why}, {"error": what the student's code raised or why the answer cannot be read},
    {"checker_error": what failed in the checker itself}."""
    if q.answer not in namespace:
        return {"missing": f"define `{q.answer}`"}
    answer = namespace[q.answer]
    if q.kind == "data" and answer is None:
        return {"missing": f"set `{q.answer}` to your answer"}
    try:
        return q.probe(answer, inputs)
    except AnswerError as err:
        return {"error": str(err), "raised": False}
    except AnswerRaised as err:
        if isinstance(err.original, NotImplementedError):
            return {"missing": f"`{q.answer}` is not implemented yet"}
        return {"error": str(err), "raised": True}
    except Exception as err:  # noqa: BLE001 - a bug of the probe, reported as such
        return {"checker_error": f"{type(err).__name__}: {err}"}


def probe_all(exercise: Exercise, namespace: dict[str, Any], inputs: dict[str, dict]) -> dict[str, dict]:
    """Every question's observation (see `probe_one`)."""
    return {q.name: probe_one(q, namespace, inputs[q.name]) for q in exercise.questions}


def measure_one(q: Question, namespace: dict[str, Any], config: dict) -> dict:
    """Run a question's measured workload on the answer (plain values it produced), or why not."""
    if q.measure is None or q.answer not in namespace:
        return {"missing": f"define `{q.answer}`"}
    try:
        return {"values": q.measure(namespace[q.answer], config)}
    except (AnswerError, AnswerRaised) as err:
        return {"error": str(err)}
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {err}"}


def _judge(exercise_id: str, name: str) -> Any:
    """The instructor's judge of a question; JudgesMissingError in an install without the judges."""
    if not sealed.judges_here():
        raise JudgesMissingError(
            f"this tracekit install has no judges (tracekit/exercises/judges/): a student's install never "
            f"carries them. Grade from a source checkout (`pip install -e .` of the repository) or the Gradescope "
            f"bundle that `tracekit autograder` builds there (needed to judge {exercise_id})")
    return importlib.import_module(f".judges.{exercise_id}", __name__).JUDGES[name]


def judge_all(exercise: Exercise, observations: dict[str, dict], inputs: dict[str, dict],
              measured: dict[str, dict] | None = None, sealed_key: bool = False) -> list[dict]:
    """Grade observations against the truth computed now: one entry per question, each with a
    `status` (see STATUSES) besides score, max_score and message (and `wrong`: the table entries
    that are wrong). `measured` holds what was measured outside the answer's process, per question;
    it replaces anything the observation says about itself. With `sealed_key` (the self-check of a
    student install) the answers are compared with the sealed key instead (inputs: the key's own)."""
    if not sealed_key:
        _judge(exercise.id, exercise.questions[0].name)  # no judges: one clear error, never a checker error
    results = []
    for q in exercise.questions:
        obs = observations.get(q.name)
        if not isinstance(obs, dict):
            obs = {"missing": "no answer was found"}
        wrong: list[str] = []
        if "missing" in obs:
            fraction, message, status = 0.0, str(obs["missing"]), "missing"
        elif "error" in obs:
            raised = obs.get("raised", True)
            fraction, status = 0.0, "answer_raised" if raised else "wrong"
            message = f"your code raised {obs['error']}" if raised else f"{obs['error']}"
        elif "checker_error" in obs:
            fraction, status = 0.0, "checker_error"
            message = f"the checker could not run your answer ({obs['checker_error']}): please report this"
        else:
            if q.measure is not None:
                obs = {**obs, "measured": (measured or {}).get(q.name)}
            try:
                verdict = (sealed.judge_sealed(exercise.id, q, obs, inputs[q.name], (measured or {}).get(q.name))
                           if sealed_key else _judge(exercise.id, q.name)(obs, inputs[q.name]))
                fraction, message = verdict[0], verdict[1]
                wrong = list(verdict[2]) if len(verdict) > 2 else []
                fraction = max(0.0, min(1.0, float(fraction)))
                status = "correct" if fraction == 1 else ("partial" if fraction > 0 else "wrong")
            except Exception as err:  # noqa: BLE001 - reported, never blamed on the student
                fraction, status = 0.0, "checker_error"
                message = f"the checker could not check this answer ({type(err).__name__}: {err}): please report this"
        score = round(q.points * fraction, 2)
        entry = {"name": q.name, "prompt": q.prompt, "score": score, "max_score": q.points, "message": message,
                 "status": status}
        if wrong:
            entry["wrong"] = wrong
        results.append(entry)
    return results


def draw_inputs(exercise: Exercise, seed: int | None = None) -> dict[str, dict]:
    """Inputs for every question, drawn from `seed` (from the OS's randomness if None)."""
    rng = random.Random(seed if seed is not None else secrets.randbits(63))
    return {q.name: q.draw(rng) for q in exercise.questions}


def _stale_answers(exercise: Exercise, namespace: dict[str, Any]) -> dict[str, str]:
    """In a notebook: answers whose last cell run (the newest that defines the name) does not
    compile any more — the kernel still holds the old value, which the grader will not see."""
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    ip = get_ipython()
    if ip is None or ip.user_ns is not namespace:  # only the notebook's own answers have a cell history
        return {}
    history = list(ip.user_ns.get("In", []))
    found: dict[str, str] = {}
    for q in exercise.questions:
        pattern = re.compile(rf"^\s*(?:def|class)\s+{re.escape(q.answer)}\b|^\s*{re.escape(q.answer)}\s*(?::[^=]*)?=",
                             re.MULTILINE)
        for number in range(len(history) - 1, 0, -1):
            source = history[number]
            if not pattern.search(source):
                continue
            try:
                ast.parse(ip.transform_cell(source))
            except SyntaxError as err:
                found[q.name] = (f"the cell you ran as [{number}] that defines `{q.answer}` has a syntax error "
                                 f"(line {err.lineno}: {err.msg}): the grade runs the notebook fresh, where "
                                 f"`{q.answer}` is what that cell defines — fix it and run it again")
            break
    return found


SELF_CHECK_SECONDS = 120  # a self-check probe that runs longer is an answer that does not end


def _time_limited(probe: Any, seconds: float) -> dict:
    """Run a probe with a wall-clock limit where a timer can interrupt it (the main thread, no timer
    set already); an answer that runs longer is reported as such."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        return probe()

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError(f"your answer ran longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return probe()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _self_measure(exercise: Exercise, namespace: dict[str, Any], inputs: dict[str, dict],
                  sealed_key: bool = False) -> dict[str, dict]:
    """In the student's kernel: each measured workload at its self-check size, with the peak bytes
    of the storages it creates (the grader measures the same workload outside the kernel), and the
    reference's figure (from the judges, or from the sealed key of a student install)."""
    from .watch import Watch

    measured = {}
    for q in exercise.questions:
        config = (inputs[q.name] or {}).get("measure")
        if q.measure is None or not isinstance(config, dict) or q.answer not in namespace:
            continue
        with Watch() as watch:
            values = measure_one(q, namespace, config["self"])
        if sealed_key:
            base = sealed.reference_watch_peak(exercise.id, q.name)
        else:
            base = importlib.import_module(f".judges.{exercise.id}", __name__).reference_watch_peak(
                q.name, json.dumps(config["self"], sort_keys=True))
        measured[q.name] = {"values": values, "peak_bytes": watch.peak, "how": "watch", "reference_peak": base}
    return measured


def check(exercise_id: str, namespace: dict[str, Any] | None = None, seed: int | None = None) -> Any:
    """Self-check the answers in this notebook: which questions pass, points, and what to fix."""
    from .report import CheckReport, deliver  # one report: the notebook shows the value, a script prints it

    exercise = get(exercise_id)
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    if sealed.being_graded():  # the grader's sandbox covers the judges
        return CheckReport(exercise.id, exercise.title, exercise.max_score, [],
                           "The self-check does not run here: this notebook is being graded.")
    sealed_key = not sealed.judges_here()  # a student install: no judges, a sealed key and fixed inputs
    drawn = draw_inputs(exercise, sealed.self_seed(exercise.id) if sealed_key else seed)
    inputs = {q.name: q.self_check(drawn[q.name]) if q.self_check else drawn[q.name] for q in exercise.questions}
    observations = {q.name: _time_limited(lambda q=q: probe_one(q, namespace, inputs[q.name]), SELF_CHECK_SECONDS)
                    for q in exercise.questions}
    for name, why in _stale_answers(exercise, namespace).items():
        observations[name] = {"missing": why}
    measured = _self_measure(exercise, namespace, inputs, sealed_key)
    results = judge_all(exercise, observations, inputs, measured, sealed_key=sealed_key)
    return deliver(CheckReport(exercise.id, exercise.title, exercise.max_score, results,
                               sealed.SEALED_NOTE if sealed_key else SELF_CHECK_NOTE))


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


__all__ = ["IDS", "SELF_CHECK_NOTE", "STATUSES", "AnswerError", "AnswerRaised", "Exercise", "Question", "canonical_id",
           "check", "draw_inputs", "get", "judge_all", "measure_one", "probe_all", "probe_one", "score_text"]
