"""The `tracekit` command."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .grading.report import StudentReport

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines
# what --timeout means, the same in grade, check and autograder (they run one sandbox)
TIMEOUT_HELP = ("seconds one notebook may take (default 120): CPU-seconds of its sandbox where a cgroup cpu "
                "controller counts them (wall-clock time then capped at 3x that), else wall-clock seconds; the "
                "same in grade, check and autograder")


def _version() -> str:
    from . import __version__

    return __version__


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per task, each with its own help."""
    parser = argparse.ArgumentParser(prog="tracekit", description="See what reverse-mode autodiff keeps in memory.")
    parser.add_argument("--version", action="version", version=f"tracekit {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="trace the sigmoid neuron y = sigmoid(w*x - 0.5) and draw it",
        description="Trace y = sigmoid(w*x + b) on the real PyTorch tape, run an observed backward, "
        "print the residuals with their free points and write the drawing as SVG.",
    )
    demo.add_argument("--x", type=float, default=1.0, help="input x (default 1.0)")
    demo.add_argument("--w", type=float, default=2.0, help="weight w (default 2.0)")
    demo.add_argument("--b", type=float, default=-0.5, help="bias b (default -0.5)")
    demo.add_argument("--out", default="tracekit-demo.svg", help="where to write the SVG (default ./tracekit-demo.svg)")
    grade = sub.add_parser(
        "grade", help="grade a folder of submissions, or one notebook (one sandboxed kernel per notebook)",
        description="Grade SUBMISSIONS (a folder of <student>.ipynb files and <student>/ folders, nbgrader's "
        "submitted/<student>/<assignment>/, or one .ipynb file) into RESULTS/<student>/results.json (Gradescope), "
        "report.json and RESULTS/grades.csv. A rerun grades only the students whose notebooks changed.",
    )
    grade.add_argument("submissions", help="the folder of submissions, or one notebook")
    grade.add_argument("--out", default="results", help="the results folder (default ./results)")
    grade.add_argument("--exercises", help="the assignment, e.g. ex01,ex03: an assigned exercise without a notebook "
                       "scores 0 (not submitted), other notebooks are reported, not graded (default: what each "
                       "student submitted)")
    grade.add_argument("--force", action="store_true", help="regrade everyone, changed or not")
    grade.add_argument("--layout", choices=("auto", "flat", "nbgrader"), default="auto",
                       help="flat: <student>.ipynb / <student>/; nbgrader: submitted/<student>/<assignment>/; "
                       "auto (default): nbgrader only when the whole tree has that shape")
    grade.add_argument("--secret-file", help="the instructor's secret the inputs are drawn from (at least 16 "
                       "bytes; default: the results folder's key)")
    grade.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    grade.add_argument("--timeout", type=float, default=120, help=TIMEOUT_HELP)
    grade.add_argument("--memory", type=int, default=4096, help="memory limit per notebook in MB (default 4096)")
    grade.add_argument("--shard", default="1/1", help="grade only part i of n, e.g. 2/5 (default 1/1)")
    grade.add_argument("--strict", action="store_true",
                       help="refuse to grade unless every sandbox gets namespaces and a cgroup")
    grade.add_argument("--unsafe", action="store_true",
                       help="as a non-root user without user namespaces or a cgroup, grade anyway (without "
                       "isolation or without limits on a sandbox's processes and total memory)")
    check = sub.add_parser("check", help="grade one notebook the way the instructor will, and print the result",
                           description="Run the grading pipeline (sandboxed kernel, fresh inputs) on one notebook.")
    check.add_argument("notebook")
    check.add_argument("--timeout", type=float, default=120, help=TIMEOUT_HELP)
    check.add_argument("--memory", type=int, default=4096, help="memory limit in MB (default 4096)")
    release = sub.add_parser("release", help="write the student release of the exercises (no solutions, no outputs)",
                             description="Copy the exercise notebooks, outputs cleared, into OUT (e.g. a repository "
                             "that nbgitpuller distributes).")
    release.add_argument("out")
    grades = sub.add_parser("grades", help="merge results folders (e.g. from shards) into one gradebook",
                            description="Merge the RESULTS folders (shards) into one gradebook. --out DIR writes "
                            "DIR/grades.csv, canvas.csv, moodle.csv, feedback/<student>.md and summary.html; "
                            "--out FILE.csv or - (the default: standard output) writes grades.csv only.")
    grades.add_argument("results", nargs="+")
    grades.add_argument("--out", default="-", help="a folder for the gradebook, a .csv path, or - (standard output)")
    grades.add_argument("--exercises", help="the assignment, e.g. ex01,ex03 (default: what the reports record)")
    autograder = sub.add_parser(
        "autograder", help="write a Gradescope autograder zip (setup.sh, run_autograder, the tracekit wheel)",
        description="Write a zip that follows Gradescope's autograder specification: setup.sh installs the pinned "
        "CPU torch and this tracekit (its wheel is inside), run_autograder grades /autograder/submission/ offline "
        "into /autograder/results/results.json. Runs from a source checkout (the bundle carries the judges).",
    )
    autograder.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    autograder.add_argument("--exercises", help="the exercises this assignment grades, e.g. ex01,ex03 (default: all)")
    autograder.add_argument("--timeout", type=float, default=120, help=TIMEOUT_HELP)
    autograder.add_argument("--memory", type=int, default=4096, help="memory limit per notebook in MB (default 4096)")
    course = sub.add_parser(
        "course", help="copy the lessons and exercises into a folder of yours (keeps notebooks you changed)",
        description="Copy the lessons (notebooks/) and the exercises (exercises/) into DIR, made if missing. "
        "A notebook already there is replaced only if you never changed it; the ones you changed are kept. "
        "Run it again to get a newer course.",
    )
    course.add_argument("dir", help="the folder for the course, e.g. ~/tracekit-course")
    lab = sub.add_parser(
        "lab", help="open JupyterLab on the course (first lesson first)",
        description="Start JupyterLab at DIR's root, with the lessons (DIR/notebooks) and exercises "
        "(DIR/exercises) both reachable, opening the first lesson. An empty or missing DIR gets the course "
        "first (as `tracekit course DIR`). Without DIR: this source checkout, or ~/tracekit-course. Ctrl-C "
        "or SIGTERM stops JupyterLab and its kernels. Extra arguments go to JupyterLab.",
    )
    lab.add_argument("dir", nargs="?", help="the course folder (default: this checkout, else ~/tracekit-course)")
    lab.add_argument("--print-command", action="store_true", help="print the command instead of running it")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tracekit` and `python -m tracekit`."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "grade":
        return _grade(args, parser)
    if args.command == "grades":
        return _grades(args.results, args.out, args.exercises)
    from .errors import TracekitError

    try:
        return _run(args, parser, extra)
    except TracekitError as err:
        print(f"tracekit {args.command}: {err}", file=sys.stderr)
    except OSError as err:  # a path the command was given: missing, a folder, not writable
        where = f" ({err.filename})" if err.filename else ""
        print(f"tracekit {args.command}: {err.strerror or err}{where}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser, extra: list[str]) -> int:
    """The commands whose errors `main` reports as one line (grade and grades report their own)."""
    if args.command == "lab":
        return _lab(args.dir, args.print_command, extra)
    if args.command == "course":
        return _course(args.dir)
    if args.command == "check":
        return _check(args)
    if args.command == "release":
        return _release(args.out)
    if args.command == "autograder":
        return _autograder(args, parser)
    return _demo(args.x, args.w, args.b, args.out)


def _course(folder: str) -> int:
    from pathlib import Path

    from .course import copy_course

    done = copy_course(Path(folder))
    print(done.summary())
    print(f"open it with: tracekit lab {folder}")
    return 0


def _lab(folder: str | None, print_only: bool, extra: list[str]) -> int:
    import importlib.util
    import shlex
    from pathlib import Path

    from .course import checkout_root, copy_course, has_course, lab_command
    from .errors import CourseError

    default = checkout_root() or Path.home() / "tracekit-course"
    root = Path(folder).expanduser() if folder is not None else default
    if root.exists() and not root.is_dir():
        raise CourseError(f"{root} is a file, not a course folder")
    if not has_course(root):
        if root.is_dir() and any(root.iterdir()):
            raise CourseError(f"{root} holds no course (no notebooks/NN_*.ipynb) and is not empty: "
                              f"`tracekit course {root}` copies the course into it, or give an empty folder")
        if print_only:
            print(f"# {root} has no course yet: `tracekit lab` copies it there first", file=sys.stderr)
        else:
            print(copy_course(root).summary())
    if importlib.util.find_spec("jupyterlab") is None:
        raise CourseError(f"JupyterLab is not installed for {sys.executable}: "
                          f"run `{sys.executable} -m pip install jupyterlab`")
    command = lab_command(sys.executable, root.resolve(), extra)
    if print_only:
        print(shlex.join(command))
        return 0
    from .serve import run_until_stopped

    return run_until_stopped(command)


def _grade(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from pathlib import Path

    from .errors import TracekitError
    from .grading.grader import Options, grade_all, parse_exercises, parse_shard, read_secret

    try:
        shard = parse_shard(args.shard)
        exercises = parse_exercises(args.exercises)
    except ValueError as err:
        parser.error(str(err))
    if args.jobs < 1 or args.timeout <= 0 or args.memory < 256:
        parser.error("--jobs must be ≥ 1, --timeout > 0 and --memory ≥ 256")
    submissions, out = Path(args.submissions), Path(args.out)
    wrong = _not_submissions(submissions) or _not_a_folder(out)
    if wrong:
        print(f"tracekit grade: {wrong}", file=sys.stderr)
        return 2
    try:
        secret = read_secret(Path(args.secret_file)) if args.secret_file else None
        options = Options(timeout=args.timeout, memory_mb=args.memory, jobs=args.jobs, shard=shard,
                          strict=args.strict, unsafe=args.unsafe, exercises=exercises, force=args.force,
                          layout=args.layout, secret=secret,
                          hide=(str(Path(args.secret_file).resolve()),) if args.secret_file else ())
        reports = grade_all(submissions, out, options)
        from .grading.gradebook import write_from

        book = write_from([out], out)  # grades.csv, canvas.csv, moodle.csv, feedback/, summary.html
    except TracekitError as err:
        print(f"tracekit grade: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the results folder cannot be made or written (a file in its path, no permission)
        print(f"tracekit grade: {err.strerror or err}" + (f" ({err.filename})" if err.filename else ""),
              file=sys.stderr)
        return 2
    for note in book.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"{_graded_line(reports)}; results in {out}, class CSV in {out / 'grades.csv'}")
    unread = [p for r in reports for p in r.exercises if p.exercise is None]
    if submissions.is_file() and unread:
        print(f"tracekit grade: {unread[0].notebook}: {unread[0].problem}", file=sys.stderr)
        return 1
    return 0


def _not_a_folder(out: object) -> str | None:
    """Why --out OUT cannot be the results folder (None: a folder, or one that can be made)."""
    from pathlib import Path

    out = Path(str(out))
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file: give a folder for the results (made if missing)"
    above = next((p for p in out.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"--out {out}: {above} is a file, so no folder can be made there"
    return None


def _graded_line(reports: list[StudentReport]) -> str:
    """`graded 3 students (1 with a notebook that could not be read: ...)`: this run's count (a
    notebook that could not be read is a part with no exercise)."""
    unread = sum(1 for r in reports if any(p.exercise is None for p in r.exercises))
    line = f"graded {len(reports)} student{'' if len(reports) == 1 else 's'}"
    if unread:
        line += f" ({unread} with a notebook that could not be read: grades.csv's problems say which)"
    return line


def _not_submissions(path: object) -> str | None:
    """Why `tracekit grade PATH` cannot grade PATH (None: a folder, or a notebook)."""
    from pathlib import Path

    path = Path(str(path))
    if path.is_dir() or (path.is_file() and path.suffix == ".ipynb"):
        return None
    if path.exists():
        return (f"{path} is a file, not a notebook (.ipynb) or a folder of submissions: give the folder that holds "
                "<student>.ipynb files or <student>/ folders")
    return f"no such folder or notebook: {path}"


def _check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .exercises import score_text
    from .grading.grader import Options, grade_notebook, require_judges

    path = Path(args.notebook)
    if not path.is_file():  # the path first: a wrong one is said the same in every install
        what = f"{path} is a folder, not a notebook" if path.is_dir() else f"no such notebook: {path}"
        print(f"tracekit check: {what}", file=sys.stderr)
        return 2
    require_judges()  # a student's install: tk.check in the notebook checks against the sealed key
    part = grade_notebook(path, path.stem, Options(timeout=args.timeout, memory_mb=args.memory))
    if part.exercise is None:  # not a notebook tracekit can read
        print(f"{path.name}: {part.problem}")
        return 1
    print(score_text(part.exercise, part.title, part.score, part.max_score, list(part.questions)))
    said = part.outcomes()  # what `tracekit grade` lists as this notebook's problems
    for line in said:
        print(f"  problem: {line}")
    return 1 if said else 0


def _release(out: str) -> int:
    import pathlib

    import nbformat

    from . import __version__
    from .course import course_source

    source = course_source() / "exercises"
    target = pathlib.Path(out)
    if target.exists() and not target.is_dir():
        print(f"tracekit release: {target} is a file, not a folder", file=sys.stderr)
        return 2
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("ex*.ipynb")):
        book = nbformat.read(path, as_version=4)
        book.metadata.setdefault("tracekit", {})["release"] = __version__  # a grade says when it is another
        for cell in book.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(book, target / path.name)
        print(f"released {target / path.name}")
    return 0


def _grades(results: list[str], out: str, exercises: str | None = None) -> int:
    from pathlib import Path

    from .errors import TracekitError
    from .grading.autograder import parse_exercises
    from .grading.gradebook import grades_text, write_from
    from .grading.report import write_atomic

    notes: list[str] = []
    try:
        assigned = list(parse_exercises(exercises)) if exercises else None
        dirs = [Path(r) for r in results]
        if out == "-" or out.endswith(".csv"):
            text = grades_text(dirs, assigned)  # a student graded twice with different scores is refused
            if out != "-":
                if Path(out).is_dir():
                    raise TracekitError(f"--out {out} is a folder: give a file name, or the folder without .csv")
                write_atomic(Path(out), text, bom=True)  # Excel reads a file with a BOM as UTF-8
        else:
            book = write_from(dirs, Path(out), assigned)
            notes = book.notes
    except (TracekitError, ValueError) as err:
        print(f"tracekit grades: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the gradebook cannot be written there (a file in its path, no permission)
        print(f"tracekit grades: {err.strerror or err}" + (f" ({err.filename})" if err.filename else ""),
              file=sys.stderr)
        return 2
    if out == "-":
        sys.stdout.write(text)
    elif out.endswith(".csv"):
        print(f"wrote {out}")
    else:
        print(f"wrote the gradebook of {len(book.signed)} students to {out}: grades.csv, canvas.csv, moodle.csv, "
              "feedback/, summary.html")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _autograder(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from pathlib import Path

    package = Path(__file__).resolve().parent
    if not (package.parent / "pyproject.toml").is_file():  # an install: rebuild from a source tree of it
        return _autograder_from_install(args)

    from .errors import TracekitError
    from .grading.autograder import BundleOptions, build, parse_exercises

    try:
        exercises = parse_exercises(args.exercises)
    except ValueError as err:
        parser.error(str(err))
    if args.timeout <= 0 or args.memory < 256:
        parser.error("--timeout must be > 0 and --memory ≥ 256")
    try:
        out = build(Path(args.out), BundleOptions(exercises, timeout=args.timeout, memory_mb=args.memory))
    except TracekitError as err:
        print(f"tracekit autograder: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} (exercises {', '.join(exercises)}): upload it as the assignment's autograder on Gradescope")
    return 0


def _autograder_from_install(args: argparse.Namespace) -> int:
    """`tracekit autograder` from an install: the bundle's wheel is built from a source tree of this
    install (tracekit/course.py:package_source), by the same command run from that tree."""
    import importlib.util
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from .course import package_source
    from .errors import CourseError

    if importlib.util.find_spec("setuptools") is None:
        raise CourseError(f"building the bundle's wheel needs setuptools: run `{sys.executable} -m pip install "
                          "setuptools`")
    with tempfile.TemporaryDirectory(prefix="tracekit-source-") as tmp:
        source = package_source(Path(tmp))
        command = [sys.executable, "-m", "tracekit", "autograder", "--out", str(Path(args.out).absolute()),
                   "--timeout", str(args.timeout), "--memory", str(args.memory)]
        if args.exercises:
            command += ["--exercises", args.exercises]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])}
        return subprocess.run(command, env=env, cwd=source).returncode


def _demo(x_value: float, w_value: float, b_value: float, out: str) -> int:
    from pathlib import Path

    import torch

    import tracekit as tk

    target = Path(out)
    if target.is_dir():
        print(f"tracekit demo: --out {out} is a folder: give a file name, e.g. {target / 'neuron.svg'}",
              file=sys.stderr)
        return 2
    target.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is made (an error here is one line)

    x = torch.tensor(x_value, requires_grad=True)
    w = torch.nn.Parameter(torch.tensor(w_value))  # the neuron's weight: a parameter; x is an input leaf
    with tk.capture() as cap:
        z = w * x + b_value
        y = torch.sigmoid(z)
    tr = cap.trace(y)
    tr.backward()
    print(f"sigmoid neuron: x={x_value:g}, w={w_value:g}, b={b_value:g}")
    print(
        f"z = w*x + b = {z.item():.4f}   y = sigmoid(z) = {y.item():.4f}   "
        f"dy/dx = {x.grad.item():.4f}   dy/dw = {w.grad.item():.4f}"
    )
    print()
    print(tr.text())
    try:
        svg = tr.svg()
    except tk.TracekitError as err:
        print(f"\ncould not draw: {err}", file=sys.stderr)
        return 1
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(svg)
    print(f"\ndrawing written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
