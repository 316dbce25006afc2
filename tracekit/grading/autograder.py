"""Gradescope autograder: build the bundle (`tracekit autograder --out autograder.zip`) and grade
one submission inside Gradescope's container (`run_autograder` calls `main` here).

The bundle follows Gradescope's autograder specification: `setup.sh` and `run_autograder` at the
root of the zip, which Gradescope unpacks into `/autograder/source`. `setup.sh` runs once when the
image is built (network available): it makes a virtual environment with the pinned CPU torch and
the tracekit wheel shipped in the bundle. `run_autograder` runs once per submission, offline: it
grades every notebook under `/autograder/submission/` with the same sandbox and trusted judge as
`tracekit grade`, and writes `/autograder/results/results.json`. The root is taken from
`AUTOGRADER_ROOT` (default `/autograder`), so the whole bundle can be run anywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import AutograderError
from .grader import _clamp

CONFIG = "tracekit-autograder.json"
SECRET = "tracekit-secret"  # the bundle's instructor secret (made when the zip is built): inputs are drawn from it
VENV = "tracekit-venv"  # under AUTOGRADER_ROOT, made by setup.sh
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024  # larger files are reported, not read
STUDENT = "student"  # the name graded when Gradescope's submission metadata names nobody
METADATA = "submission_metadata.json"  # Gradescope's, at AUTOGRADER_ROOT: who submitted (users[].id / email / name)


@dataclass(frozen=True)
class BundleOptions:
    """What the bundle grades and the limits it grades with."""

    exercises: tuple[str, ...]
    timeout: float = 120.0  # wall seconds per notebook
    memory_mb: int = 4096  # memory limit of each sandboxed kernel


def parse_exercises(text: str | None) -> tuple[str, ...]:
    """'ex01,ex03' -> ('ex01', 'ex03'); None or '' -> every exercise; unknown ids raise ValueError."""
    from ..exercises import IDS
    from .grader import parse_exercises as assignment

    return assignment(text) or IDS


def torch_pin() -> str:
    """The torch release this tracekit is tested with here (the installed one, without '+cpu')."""
    return metadata.version("torch").split("+")[0]


def _project_root() -> Path:
    root = Path(__file__).resolve().parents[2]
    toml = root / "pyproject.toml"
    if not toml.is_file() or 'name = "tracekit"' not in toml.read_text(encoding="utf-8"):
        raise AutograderError("the autograder bundle ships a wheel built from tracekit's source: run "
                              "`tracekit autograder` from a source checkout (pip install -e .)")
    return root


def build_wheel(dest: Path) -> Path:
    """Build this tracekit as a wheel into `dest` (offline: from a clean copy of the source)."""
    root = _project_root()
    with tempfile.TemporaryDirectory(prefix="tracekit-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(root / name, src / name)
        shutil.copytree(root / "tracekit", src / "tracekit",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                               "--no-index", "-q", "-w", str(dest), str(src)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AutograderError("building the tracekit wheel failed (is setuptools installed?):\n"
                                  + done.stderr[-2000:])
    wheels = sorted(dest.glob(f"tracekit-{__version__}-*.whl"))
    if not wheels:
        raise AutograderError(f"pip wrote no tracekit-{__version__} wheel into {dest}")
    return wheels[-1]


SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (with network).
# It makes $AUTOGRADER_ROOT/@VENV@ with CPU torch @TORCH@ and tracekit @VERSION@ (the wheel in wheels/).
#   TRACEKIT_PYTHON                 interpreter for the venv (default: python3; installed with apt if missing)
#   TRACEKIT_TORCH_INDEX            where the CPU torch wheel comes from (default: PyTorch's CPU index)
#   TRACEKIT_WHEELHOUSE             a folder of wheels: install from it only (pip --no-index), no network
#   TRACEKIT_REUSE_SITE_PACKAGES    testing only: a site-packages folder whose torch and other packages
#                                   the venv reuses (through a .pth file) instead of installing them
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SRC="$ROOT/source"
VENV="$ROOT/@VENV@"
PY="${TRACEKIT_PYTHON:-python3}"
WHEEL="$SRC/wheels/@WHEEL@"
apt_install() { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; }
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_install python3 python3-venv python3-pip
  PY=python3
fi
# the sandbox: bubblewrap for namespaces, setpriv (util-linux) for an unprivileged uid
command -v bwrap >/dev/null 2>&1 || apt_install bubblewrap \
  || echo "setup.sh: no bubblewrap: grading will say that isolation is incomplete"
pip_install() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
if [ -n "${TRACEKIT_REUSE_SITE_PACKAGES:-}" ]; then
  "$PY" -m venv --without-pip "$VENV"  # pip too comes from the reused folder
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  printf '%s\n' "$TRACEKIT_REUSE_SITE_PACKAGES" > "$site/zz-tracekit-reuse.pth"
  # --ignore-installed: a tracekit seen through the reused folder must not stand in for the wheel
  pip_install --no-index --no-deps --ignore-installed "$WHEEL"
elif [ -n "${TRACEKIT_WHEELHOUSE:-}" ]; then
  "$PY" -m venv "$VENV"
  pip_install --no-index --find-links "$TRACEKIT_WHEELHOUSE" "torch==@TORCH@" "$WHEEL"
else
  "$PY" -m venv "$VENV"
  pip_install "torch==@TORCH@" --index-url "${TRACEKIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
  pip_install "$WHEEL"
fi
"$VENV/bin/python" - <<'EOF'
import torch, tracekit
assert torch.__version__.split("+")[0] == "@TORCH@", f"torch {torch.__version__} installed, @TORCH@ expected"
assert tracekit.__version__ == "@VERSION@", tracekit.__version__
import tracekit.grading.autograder, tracekit.grading.grader  # noqa: F401 - everything grading needs imports
print(f"tracekit {tracekit.__version__} from {tracekit.__file__}; torch {torch.__version__}")
EOF
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this once per submission, as root, without network. It grades
# $AUTOGRADER_ROOT/submission/ and writes $AUTOGRADER_ROOT/results/results.json.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
export AUTOGRADER_ROOT="$ROOT"
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
"$ROOT/@VENV@/bin/python" -m tracekit.grading.autograder --root "$ROOT" --config "$ROOT/source/@CONFIG@"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  # the grader itself failed (not the submission): still hand Gradescope a valid results.json
  printf '{"score": 0, "execution_time": 0, "tests": [], "output": "%s"}\n' \
    "The autograder failed (exit status $status) before it could grade this submission; this is not your fault.\
 Please tell your instructor." \
    > "$ROOT/results/results.json"
fi
exit 0
"""


def build(out: Path, options: BundleOptions) -> Path:
    """Write the Gradescope autograder zip to `out` and return its path."""
    from ..exercises import get, sealed

    if not sealed.judges_here():
        raise AutograderError("the bundle grades with the instructor's judges (tracekit/exercises/judges/), which "
                              "this install does not carry (a student's wheel never does): run `tracekit "
                              "autograder` from a source checkout of tracekit (pip install -e .)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch_version = torch_pin()
    config = {
        "tracekit": __version__, "torch": torch_version, "exercises": list(options.exercises), "secret_file": SECRET,
        "timeout": options.timeout, "memory_mb": options.memory_mb,
        "max_score": sum(get(e).max_score for e in options.exercises),
    }
    with tempfile.TemporaryDirectory(prefix="tracekit-bundle-") as tmp:
        wheel = build_wheel(Path(tmp))
        fill = {"@VENV@": VENV, "@TORCH@": torch_version, "@VERSION@": __version__, "@WHEEL@": wheel.name,
                "@CONFIG@": CONFIG}
        scripts = {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER}
        for key, value in fill.items():
            scripts = {name: text.replace(key, value) for name, text in scripts.items()}
        partial = out.with_name(f".{out.name}.partial")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            for name, text in scripts.items():
                _add(bundle, name, text.encode(), executable=True)
            _add(bundle, CONFIG, (json.dumps(config, indent=2) + "\n").encode())
            _add(bundle, SECRET, secrets.token_hex(32).encode(), private=True)
            _add(bundle, f"wheels/{wheel.name}", wheel.read_bytes())
        os.replace(partial, out)
    return out


def _add(bundle: zipfile.ZipFile, name: str, data: bytes, executable: bool = False, private: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = ((0o600 if private else 0o755 if executable else 0o644) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    bundle.writestr(info, data)


def extract(bundle: Path, source: Path) -> None:
    """Unpack a bundle the way Gradescope does (into `source`), keeping the executable bits."""
    with zipfile.ZipFile(bundle) as archive:
        for info in archive.infolist():
            target = source / info.filename
            archive.extract(info, source)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)


# ---- grading one submission (inside the Gradescope container) ----

def find_notebooks(folder: Path) -> tuple[list[Path], list[str]]:
    """Every regular `.ipynb` file under `folder` (no links, no hidden folders or checkpoints), and notes
    on what was passed over."""
    found: list[Path] = []
    notes: list[str] = []
    if not folder.is_dir():
        return found, [f"no submission folder at {folder}"]
    for parent, dirs, files in os.walk(folder, followlinks=False):
        keep = []
        for d in sorted(dirs):
            shown = str((Path(parent) / d).relative_to(folder))
            if os.path.islink(Path(parent) / d):
                notes.append(f"{shown}/: passed over (a symbolic link)")
            elif d.startswith(".") or d == "__MACOSX":
                notes.append(f"{shown}/: passed over (a hidden folder)")
            else:
                keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            if not name.endswith(".ipynb"):
                continue
            path = Path(parent) / name
            shown = str(path.relative_to(folder))
            if name.startswith("."):
                notes.append(f"{shown}: passed over (a hidden file)")
                continue
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                notes.append(f"{shown}: passed over (not a regular file)")
            elif info.st_size > MAX_NOTEBOOK_BYTES:
                notes.append(f"{shown}: passed over ({info.st_size / 2**20:.0f} MB; the limit is "
                             f"{MAX_NOTEBOOK_BYTES // 2**20} MB, clear the outputs and resubmit)")
            else:
                found.append(path)
    return found, notes


def _read_regular(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_NOTEBOOK_BYTES + 1)[:MAX_NOTEBOOK_BYTES]
    finally:
        os.close(fd)


def student_name(root: Path) -> tuple[str, str | None]:
    """Who this submission is (from Gradescope's `submission_metadata.json`: every user of a group, by
    Gradescope id, else e-mail, else name) as a plain name the grader seeds the inputs from, and a note
    when the metadata names nobody. Each student draws inputs of her own from the bundle's secret, so
    a classmate's feedback is no lookup table."""
    try:
        with open(root / METADATA, "rb") as fh:
            users = json.loads(fh.read(1 << 20)).get("users")
    except (OSError, ValueError, AttributeError, RecursionError, UnicodeDecodeError):
        users = None
    who = []
    for user in users if isinstance(users, list) else []:
        if isinstance(user, dict):
            key = next((f"{k}:{str(user[k]).strip().lower()}" for k in ("id", "email", "name")
                        if isinstance(user.get(k), (str, int)) and str(user[k]).strip()), None)
            if key:
                who.append(key)
    if not who:
        return STUDENT, (f"{METADATA} names no student: inputs were drawn for an unnamed student "
                         "(from the notebook's code and the bundle's secret)")
    return "gs-" + hashlib.sha256("\0".join(sorted(set(who))).encode("utf-8", "surrogatepass")).hexdigest()[:20], None


def grade_submission(root: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Grade `root/submission/` with the trusted grader and return Gradescope's results.json content."""
    from .grader import REPORT, Options, folder_for, grade_all, outcomes, read_secret

    started = time.monotonic()
    exercises = [e for e in config.get("exercises", []) if isinstance(e, str)]
    notebooks, notes = find_notebooks(root / "submission")
    student, unnamed = student_name(root)
    print(unnamed or f"grading for {student} (from {METADATA})", flush=True)  # the instructor's log
    parts: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tracekit-autograder-") as tmp:
        folder = Path(tmp) / "class" / student
        folder.mkdir(parents=True)
        shown: dict[str, str] = {}
        for i, path in enumerate(notebooks):
            staged = f"{i:03d}.ipynb"  # the grader recognises the exercise from the content, not the name
            try:
                (folder / staged).write_bytes(_read_regular(path))
            except OSError as err:
                notes.append(f"{path.relative_to(root / 'submission')}: cannot be read ({err})")
                continue
            shown[f"{student}/{staged}"] = str(path.relative_to(root / "submission"))
        if shown:
            hide = tuple(str(p) for p in (root / "results", root / "source") if p.is_dir())
            secret_path = root / "source" / str(config.get("secret_file", SECRET))
            options = Options(timeout=float(config.get("timeout", 120)), memory_mb=int(config.get("memory_mb", 4096)),
                              jobs=1, hide=hide, exercises=tuple(exercises) or None,
                              secret=read_secret(secret_path) if secret_path.is_file() else None)
            log: list[str] = []
            grade_all(folder.parent, Path(tmp) / "out", options, progress=log.append)
            print("\n".join(log), flush=True)  # run_autograder's stdout: the instructor sees it
            report_path = Path(tmp) / "out" / folder_for(student) / REPORT
            report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.is_file() else None
            if report is None:
                notes.append("the grader wrote no report for this submission (see the autograder log)")
            else:
                parts = [p for p in report.get("exercises") or [] if isinstance(p, dict)]
                isolated = str(report.get("isolation", ""))
                if isolated and not isolated.startswith("isolation: full"):
                    notes.append(isolated)
                told = {line for p in parts for line in outcomes(p)}  # results_json tells these per notebook
                notes += [_rename(str(problem), shown) for problem in report.get("problems") or []
                          if problem not in told]
                parts = [p for p in parts if p.get("status") != "not submitted"]  # results_json says so itself
        for part in parts:
            part["notebook"] = shown.get(str(part.get("notebook")), str(part.get("notebook")))
            if part.get("problem"):
                part["problem"] = _rename(str(part["problem"]), shown)
            box = part.get("sandbox") if isinstance(part.get("sandbox"), dict) else {}
            for key in ("notes", "cell_errors"):
                if isinstance(box.get(key), list):
                    box[key] = [_rename(str(n), shown) for n in box[key]]
    return results_json(exercises, parts, notes, time.monotonic() - started)


def _rename(text: str, shown: dict[str, str]) -> str:
    """A message about a staged copy (000.ipynb), told with the name the student gave the file."""
    for staged, name in shown.items():
        text = text.replace(staged, name)
    return text


def results_json(exercises: list[str], parts: list[dict[str, Any]], notes: list[str],
                 seconds: float) -> dict[str, Any]:
    """Gradescope's results.json: one test per question of each chosen exercise, scores clamped to
    the points the exercise definition gives (never taken from the report)."""
    from ..exercises import get

    chosen: dict[str, dict[str, Any]] = {}
    lines: list[str] = []
    for part in parts:
        name, exercise_id = part.get("notebook"), part.get("exercise")
        if part.get("problem"):
            lines.append(f"{name}: {part['problem']}")
            continue
        if exercise_id not in exercises:
            lines.append(f"{name}: {exercise_id} is not part of this assignment (it grades {', '.join(exercises)})")
        elif exercise_id in chosen:
            lines.append(f"{name}: another notebook for {exercise_id} ({chosen[exercise_id]['notebook']}) was "
                         "graded; submit one notebook per exercise")
        else:
            chosen[exercise_id] = part
    tests = []
    total = 0.0
    for number, exercise_id in enumerate(exercises, 1):
        exercise = get(exercise_id)
        part = chosen.get(exercise_id)
        judged = {str(q.get("name")): q for q in (part or {}).get("questions", []) if isinstance(q, dict)}
        if part is not None:
            got = sum(_clamp(judged.get(q.name, {}).get("score"), q.points) for q in exercise.questions)
            lines.append(f"{part['notebook']}: {exercise_id} · {exercise.title}: {got:g} / {exercise.max_score}")
            box = part.get("sandbox") or {}
            lines += [f"  error: {e}" for e in box.get("cell_errors", [])]
            lines += [f"  note: {n}" for n in box.get("notes", [])]
        else:
            lines.append(f"{exercise_id} · {exercise.title}: no notebook for this exercise was found in the "
                         "submission (0 / {})".format(exercise.max_score))
        for sub, q in enumerate(exercise.questions, 1):
            entry = judged.get(q.name)
            score = _clamp(entry.get("score"), q.points) if entry else 0.0
            if part is None:
                output = f"no notebook for {exercise_id} was submitted"
            elif entry is None:
                output = "this question was not graded (see the output above)"
            else:
                output = str(entry.get("message") or "")
            total += score
            tests.append({"name": f"{exercise_id} {q.name}: {q.prompt}", "number": f"{number}.{sub}",
                          "score": score, "max_score": float(q.points),
                          "status": "passed" if score >= q.points else "failed",
                          "output": output, "output_format": "text", "visibility": "visible"})
    lines += notes
    most = sum(get(e).max_score for e in exercises)
    lines.append(f"Total: {total:g} / {most}")
    # every output holds a student's text (cell errors, file names): Gradescope shows "text" as it is,
    # never as Markdown or HTML, so no link or markup of hers can open
    return {"score": round(total, 2), "execution_time": int(round(seconds)), "output": "\n".join(lines),
            "output_format": "text", "test_output_format": "text", "tests": tests}


def failure_json(message: str, exercises: list[str], seconds: float) -> dict[str, Any]:
    """A valid results.json for when grading itself failed: every question 0, and why."""
    doc = results_json(exercises, [], [], seconds)
    doc["output"] = f"{message}\n\n{doc['output']}"
    for test in doc["tests"]:
        test["output"] = "not graded: the autograder failed (not your fault); please tell your instructor"
    return doc


def main(argv: list[str] | None = None) -> int:
    """`run_autograder`'s entry point: grade AUTOGRADER_ROOT/submission into results/results.json."""
    from .grader import write_atomic

    parser = argparse.ArgumentParser(prog="python -m tracekit.grading.autograder")
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    parser.add_argument("--config", help=f"the bundle's {CONFIG} (default: ROOT/source/{CONFIG})")
    args = parser.parse_args(argv)
    root = Path(args.root)
    config_path = Path(args.config) if args.config else root / "source" / CONFIG
    started = time.monotonic()
    config = json.loads(config_path.read_text(encoding="utf-8"))
    try:
        doc = grade_submission(root, config)
    except Exception as err:  # noqa: BLE001 - Gradescope must always get a valid file
        print(f"autograder: grading failed: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        doc = failure_json(f"The autograder failed ({type(err).__name__}) before it finished grading; this is "
                           "not your fault. Please tell your instructor.", list(config.get("exercises", [])),
                           time.monotonic() - started)
    write_atomic(root / "results" / "results.json", json.dumps(doc, indent=2, allow_nan=False))
    print(f"autograder: {doc['score']:g} points; results in {root / 'results' / 'results.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
