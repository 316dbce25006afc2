"""The self-check of a student install: answers compared with a sealed key, never with a reference.

The student's package carries no judges (`tracekit/exercises/judges/` holds reference answers and the
truth of every fixed case; only the instructor's side has it). `tk.check` in a student install draws
the self-check's own fixed inputs and compares what the probes observe with `selfcheck_key.json`,
written by `python solutions/build.py` from the judges:

- a table entry, or an exact number a function returns, is compared through a salted digest of its
  canonical form (every accepted answer of a case has one): the key says whether an entry is right,
  never what it is;
- a function's floating-point results on the self-check's fixed inputs are figures (values at
  points the grade never uses: the grade draws its inputs per submission from a secret);
- a memory criterion compares with the reference's figure at the self-check's size.

Nothing here computes a truth; a question whose check needs more than this (a plan measured against
budgets) runs that measurement here, which holds no answer either.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

KEY_FILE = Path(__file__).with_name("selfcheck_key.json")
JUDGES_DIR = Path(__file__).with_name("judges")
SEALED_NOTE = ("This self-check ran in your kernel against a sealed key (it says which entries are wrong, not what "
               "they should be); the instructor's grade runs this notebook again from the top in a fresh sandbox, "
               "on inputs drawn for your submission, and says what to look at.")


def judges_here() -> bool:
    """Whether this install holds the instructor's judges (a source checkout or an instructor install)."""
    return (JUDGES_DIR / "common.py").is_file()


def being_graded() -> bool:
    """Whether this runs inside a grading sandbox: its runner (`tracekit.grading.runner`) runs the cells,
    or the judges' folder is there but covered (empty). Nothing depends on it but the self-check's
    politeness: a notebook that fakes it only skips its own self-check."""
    if "tracekit.grading.runner" in sys.modules:
        return True
    try:
        return JUDGES_DIR.is_dir() and not any(os.scandir(JUDGES_DIR))
    except OSError:
        return True


@functools.lru_cache(maxsize=1)
def load_key() -> dict[str, Any]:
    """The sealed key of every exercise (selfcheck_key.json)."""
    return json.loads(KEY_FILE.read_text(encoding="utf-8"))


# ---- canonical forms of an answer (what a digest is taken of) -------------------------------------

def _word_set(value: Any) -> list[str] | None:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return sorted({v.strip() for v in value})


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _whole(value: Any) -> int | None:
    if type(value) is float and value.is_integer():
        return int(value)
    return _int(value)


def canonical(shape: str, value: Any) -> str | None:
    """The canonical text of an answer of this shape (None: not an answer of that shape). Shapes: set
    (of strings; one string or None allowed), list (of strings), sets (a dict of sets), steps (a dict
    of int or None), ints (a list of ints), int, whole (an int or a whole float), wholes (a list of
    those), word (a string, case and spaces ignored), json (any plain value, exactly)."""
    if shape == "set":
        form: Any = _word_set(value)
    elif shape == "list":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        form = [v.strip() for v in value] if ok else None
    elif shape == "sets":
        form = {k.strip(): _word_set(v) for k, v in value.items()} if isinstance(value, dict) else None
        form = None if form is None or any(v is None for v in form.values()) else form
    elif shape == "steps":
        ok = isinstance(value, dict) and all(v is None or type(v) is int for v in value.values())
        form = {k.strip(): v for k, v in value.items()} if ok else None
    elif shape == "ints":
        form = value if isinstance(value, list) and all(type(v) is int for v in value) else None
    elif shape == "int":
        form = _int(value)
    elif shape == "whole":  # an int, or a float that is a whole number (of bytes)
        form = _whole(value)
    elif shape == "wholes":
        wholes = [_whole(v) for v in value] if isinstance(value, list) else [None]
        form = None if None in wholes else wholes
    elif shape == "word":
        form = value.strip().lower() if isinstance(value, str) else None
    elif shape == "json":
        form = value
    else:
        raise ValueError(f"unknown answer shape {shape!r}")
    return None if form is None else json.dumps(form, sort_keys=True, separators=(",", ":"))


def seal(salt: str, where: str, text: str) -> str:
    """The salted digest of one canonical answer at one place (exercise, question, case)."""
    return hashlib.sha256(f"{salt}\0{where}\0{text}".encode()).hexdigest()[:32]


def _sealed_right(salt: str, where: str, shape: str, value: Any, accepted: list[str]) -> bool:
    text = canonical(shape, value)
    return text is not None and seal(salt, where, text) in accepted


# ---- figures: floats at the self-check's fixed points ---------------------------------------------

def _same(got: Any, want: Any, ignore: frozenset[str], tol: float, sealer: Any = None) -> bool:
    """`got` has `want`'s structure and values (floats within tol·(1+|want|); a "dtype" of float64 in a dict
    tightens the tolerance of what it holds; {"sealed": digest} matches the value whose canonical JSON has
    that digest, through `sealer`); keys in `ignore` are not compared."""
    if isinstance(want, dict) and set(want) == {"sealed"}:
        text = canonical("json", got)
        return sealer is not None and text is not None and sealer(text) == want["sealed"]
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return False
        inner = 1e-9 if want.get("dtype") == "float64" else tol
        return all(k in got and _same(got[k], v, ignore, inner, sealer) for k, v in want.items() if k not in ignore)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            _same(g, w, ignore, tol, sealer) for g, w in zip(got, want))
    if type(want) is float:
        return type(got) in (int, float) and abs(got - want) <= tol * (1 + abs(want))
    return type(got) is type(want) and got == want


def sealed_figures(value: Any, keys: frozenset[str], sealer: Any) -> Any:
    """A reference observation as the key keeps it: the values under `keys` replaced by their digests."""
    if isinstance(value, dict):
        return {k: ({"sealed": sealer(canonical("json", v))} if k in keys else sealed_figures(v, keys, sealer))
                for k, v in value.items()}
    if isinstance(value, list):
        return [sealed_figures(v, keys, sealer) for v in value]
    return value


# ---- the self-check's verdicts ---------------------------------------------------------------------

def _table(spec: dict, salt: str, where: str, obs: dict, cases: list[str]) -> tuple[float, str, list[str]]:
    answers = obs.get("value")
    if not isinstance(answers, dict):
        return 0.0, "expected a dict with one entry per case", []
    answers = {k.strip(): v for k, v in answers.items()}
    wrong = [c for c in cases if c not in answers or not _sealed_right(salt, f"{where}\0{c}", spec["shape"],
                                                                     answers[c], spec["cases"][c])]
    if not wrong:
        return 1.0, "correct", []
    missing = [c for c in wrong if c not in answers]
    said = [f"{', '.join(map(repr, missing))}: no entry (fill in every case)"] if missing else []
    if len(wrong) > len(missing):
        said.append(f"{', '.join(repr(c) for c in wrong if c not in missing)}: not what the runtime does "
                    f"({spec['hint']})")
    return (len(cases) - len(wrong)) / len(cases), "; ".join(said), wrong


def _values(spec: dict, salt: str, where: str, obs: dict) -> tuple[float, str]:
    values = obs.get("values")
    if not isinstance(values, list) or len(values) != len(spec["cases"]):
        return 0.0, "the checker got no values from your function"
    right = sum(_sealed_right(salt, f"{where}\0{i}", spec["shape"], v, accepted)
                for i, (v, accepted) in enumerate(zip(values, spec["cases"])))
    if right == len(values):
        return 1.0, "correct"
    return right / len(values), f"{len(values) - right} of the {len(values)} self-check cases are off ({spec['hint']})"


def _one_saved(case: Any) -> bool:
    """A custom Function's case saved exactly one tensor, its input or its output, with save_for_backward."""
    saved = case.get("saved") if isinstance(case, dict) else None
    return (isinstance(saved, list) and len(saved) == 1 and isinstance(saved[0], dict) and not case.get("on_ctx")
            and bool(saved[0].get("output") or saved[0].get("input")))


def _figures(spec: dict, salt: str, where: str, obs: dict, measured: dict | None) -> tuple[float, str]:
    ignore = frozenset(spec.get("ignore", []))
    if not _same(obs, spec["expect"], ignore, spec.get("tol", 1e-5), lambda text: seal(salt, where, text)):
        return 0.0, f"the results differ from the runtime's on the self-check's inputs ({spec['hint']})"
    if spec.get("one_saved") and not all(_one_saved(case) for case in obs.get("cases") or [None]):
        return 2 / 3, ("save exactly one tensor with ctx.save_for_backward, x or the output itself (not a copy, not "
                       "a ctx attribute)")
    memory = spec.get("memory")
    if memory is None:
        return 1.0, "correct"
    share = memory["share"]
    values = ((measured or {}).get("values") or {}).get("values")
    if not isinstance(values, dict):
        why = ((measured or {}).get("values") or {}).get("error") or "it did not finish"
        return 1 - share, f"the measured run did not give its values: {why}"
    if not _same(values, memory["expect"], ignore, spec.get("tol", 1e-5)):
        return 1 - share, "on the measured run the results differ from the runtime's"
    extra = (measured or {}).get("peak_bytes", 0) - memory["reference_peak"]
    if extra > memory["slack"]:
        return 1 - share, (f"the measured run kept {extra / 2**20:.0f} MiB more than an answer done right "
                           f"({memory['hint']})")
    return 1.0, "correct"


def judge_sealed(exercise_id: str, question: Any, obs: dict, inputs: dict,
                 measured: dict | None) -> tuple[float, str, list[str]]:
    """One question's verdict against the sealed key: (fraction, message, wrong entries)."""
    key = load_key()[exercise_id]
    spec = key["questions"][question.name]
    where = f"{exercise_id}\0{question.name}"
    if spec["kind"] == "table":
        return _table(spec, key["salt"], where, obs, list(inputs["cases"]))
    if spec["kind"] == "values":
        return (*_values(spec, key["salt"], where, obs), [])
    if spec["kind"] == "figures":
        return (*_figures(spec, key["salt"], where, obs, measured), [])
    if spec["kind"] == "plan":
        from .plans import judge_plans

        return judge_plans(obs)
    raise ValueError(f"unknown kind of sealed check {spec['kind']!r}")


def self_seed(exercise_id: str) -> int:
    """The seed of the self-check's fixed inputs (the key's figures are for these)."""
    return int(load_key()[exercise_id]["seed"])


def reference_watch_peak(exercise_id: str, question: str) -> int:
    """The reference's storage high-water mark of a measured workload at the self-check's size."""
    return int(load_key()[exercise_id]["questions"][question]["memory"]["reference_peak"])
