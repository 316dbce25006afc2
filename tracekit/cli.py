"""The `tracekit` command."""

from __future__ import annotations

import argparse
import sys

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tracekit` and `python -m tracekit`."""
    parser = argparse.ArgumentParser(prog="tracekit", description="See what reverse-mode autodiff keeps in memory.")
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
    grade.add_argument("--timeout", type=float, default=120,
                       help="seconds per notebook: CPU-seconds where a cpu cgroup counts them (default 120)")
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
    check.add_argument("--timeout", type=float, default=120, help="wall seconds (default 120)")
    check.add_argument("--memory", type=int, default=4096, help="memory limit in MB (default 4096)")
    release = sub.add_parser("release", help="write the student release of the exercises (no solutions, no outputs)",
                             description="Copy the exercise notebooks, outputs cleared, into OUT (e.g. a repository "
                             "that nbgitpuller distributes).")
    release.add_argument("out")
    grades = sub.add_parser("grades", help="merge results folders (e.g. from shards) into one CSV",
                            description="Write one CSV row per student found in the RESULTS folders.")
    grades.add_argument("results", nargs="+")
    grades.add_argument("--out", default="-", help="CSV path (default: standard output)")
    autograder = sub.add_parser(
        "autograder", help="write a Gradescope autograder zip (setup.sh, run_autograder, the tracekit wheel)",
        description="Write a zip that follows Gradescope's autograder specification: setup.sh installs the pinned "
        "CPU torch and this tracekit (its wheel is inside), run_autograder grades /autograder/submission/ offline "
        "into /autograder/results/results.json. Run from a source checkout.",
    )
    autograder.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    autograder.add_argument("--exercises", help="the exercises this assignment grades, e.g. ex01,ex03 (default: all)")
    autograder.add_argument("--timeout", type=float, default=120, help="wall seconds per notebook (default 120)")
    autograder.add_argument("--memory", type=int, default=4096, help="memory limit per notebook in MB (default 4096)")
    lab = sub.add_parser("lab", help="open JupyterLab on the lessons (first lesson first)",
                         description="Start JupyterLab on the notebooks/ folder of this checkout (or DIR), "
                         "opening the first lesson. Extra arguments go to JupyterLab.")
    lab.add_argument("dir", nargs="?", help="folder of notebooks (default: the lessons next to tracekit)")
    lab.add_argument("--print-command", action="store_true", help="print the command instead of running it")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "lab":
        return _lab(args.dir, args.print_command, extra)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "grade":
        return _grade(args, parser)
    if args.command == "check":
        return _check(args)
    if args.command == "release":
        return _release(args.out)
    if args.command == "grades":
        return _grades(args.results, args.out)
    if args.command == "autograder":
        return _autograder(args, parser)
    return _demo(args.x, args.w, args.b, args.out)


def _lab(folder: str | None, print_only: bool, extra: list[str]) -> int:
    import pathlib
    import shlex
    import subprocess

    root = pathlib.Path(folder) if folder else pathlib.Path(__file__).resolve().parent.parent / "notebooks"
    if not root.is_dir():
        print(f"no notebooks folder at {root}: pass one, e.g. `tracekit lab path/to/notebooks`", file=sys.stderr)
        return 2
    first = sorted(root.glob("[0-9]*.ipynb"))
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", *extra]
    if first:
        command.append(f"--LabApp.default_url=/lab/tree/{first[0].name}")
    if print_only:
        print(shlex.join(command))
        return 0
    return subprocess.call(command)


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
    submissions = Path(args.submissions)
    if not submissions.is_dir() and not (submissions.is_file() and submissions.suffix == ".ipynb"):
        print(f"tracekit grade: no such folder or notebook: {submissions}", file=sys.stderr)
        return 2
    try:
        secret = read_secret(Path(args.secret_file)) if args.secret_file else None
        options = Options(timeout=args.timeout, memory_mb=args.memory, jobs=args.jobs, shard=shard,
                          strict=args.strict, unsafe=args.unsafe, exercises=exercises, force=args.force,
                          layout=args.layout, secret=secret)
        reports = grade_all(submissions, Path(args.out), options)
    except TracekitError as err:
        print(f"tracekit grade: {err}", file=sys.stderr)
        return 2
    print(f"graded {len(reports)} students; results in {args.out}, class CSV in {Path(args.out) / 'grades.csv'}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .exercises import score_text
    from .grading.grader import Options, grade_notebook

    path = Path(args.notebook)
    if not path.is_file():
        print(f"no such notebook: {path}", file=sys.stderr)
        return 2
    part = grade_notebook(path, path.stem, Options(timeout=args.timeout, memory_mb=args.memory))
    if part.get("problem"):
        print(f"{path.name}: {part['problem']}")
        return 1
    print(score_text(part["exercise"], part["title"], part["score"], part["max_score"], part["questions"]))
    for note in part["sandbox"]["notes"]:
        print(f"  note: {note}")
    return 0


def _release(out: str) -> int:
    import pathlib

    import nbformat

    source = pathlib.Path(__file__).resolve().parent.parent / "exercises"
    if not source.is_dir():
        print("the exercises/ folder is not next to this tracekit (run from a source checkout)", file=sys.stderr)
        return 2
    target = pathlib.Path(out)
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("ex*.ipynb")):
        book = nbformat.read(path, as_version=4)
        for cell in book.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(book, target / path.name)
        print(f"released {target / path.name}")
    return 0


def _grades(results: list[str], out: str) -> int:
    from pathlib import Path

    from .errors import TracekitError
    from .grading.grader import grades_csv, write_atomic

    try:
        text = grades_csv([Path(r) for r in results])
    except TracekitError as err:
        print(f"tracekit grades: {err}", file=sys.stderr)
        return 2
    if out == "-":
        sys.stdout.write(text)
    else:
        write_atomic(Path(out), text)
        print(f"wrote {out}")
    return 0


def _autograder(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from pathlib import Path

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


def _demo(x_value: float, w_value: float, b_value: float, out: str) -> int:
    import torch

    import tracekit as tk

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
