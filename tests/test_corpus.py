"""The blind corpus (tests/corpus/, written by someone who read only the student notebooks, the
lessons and the README): every variant graded by `tracekit grade` in real sandboxes must score as
its header expects (full, zero, or less than full per question), and on every variant expected
to be fully correct the self-check (`tk.check` in a kernel-like namespace) agrees with the grade."""

import re
import sys
from pathlib import Path

import nbformat
import pytest

import tracekit.exercises as ex
from tracekit.grading import isolation
from tracekit.grading.grader import Options, grade_all

pytestmark = pytest.mark.grading
CORPUS = Path(__file__).resolve().parent / "corpus"
ISO = isolation.detect()


def parse(path: Path) -> tuple[dict[str, str], list[str]]:
    """A variant file: its expectations {question: full|zero|less} and its code cells."""
    text = path.read_text(encoding="utf-8")
    expect = dict(re.findall(r"(q\d+)=(full|zero|less)", re.search(r"^# expect:(.*)$", text, re.M).group(1)))
    cells = [c.strip("\n") for c in re.split(r"^# %%.*$", text, flags=re.M)[1:]]
    return expect, [c for c in cells if c.strip()]


def variants() -> list[tuple[str, Path]]:
    return sorted((p.parent.name, p) for p in CORPUS.glob("ex*/*.py"))


def notebook(exercise_id: str, cells: list[str]) -> nbformat.NotebookNode:
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    book.metadata["tracekit"] = {"exercise": exercise_id}
    return book


def name_of(exercise_id: str, path: Path) -> str:
    return f"{exercise_id}-{path.stem}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not variants():
        pytest.skip("no corpus")
    subs = tmp_path_factory.mktemp("corpus") / "subs"
    subs.mkdir()
    for exercise_id, path in variants():
        nbformat.write(notebook(exercise_id, parse(path)[1]), subs / f"{name_of(exercise_id, path)}.ipynb")
    reports = grade_all(subs, subs.parent / "out", Options(timeout=300, memory_mb=3072, jobs=2, cell_timeout=10),
                        progress=lambda line: None)
    return {r["student"]: r for r in reports}


def test_corpus_has_six_right_and_six_wrong_per_exercise():
    counts: dict[str, list[int]] = {}
    for exercise_id, path in variants():
        expect, _ = parse(path)
        assert set(expect) == {q.name for q in ex.get(exercise_id).questions}, path
        right = all(v == "full" for v in expect.values())
        counts.setdefault(exercise_id, [0, 0])[0 if right else 1] += 1
    for exercise_id, (right, wrong) in counts.items():
        assert right >= 6 and wrong >= 6, (exercise_id, right, wrong)


@pytest.mark.skipif(not ISO.namespaces, reason="needs bubblewrap")
@pytest.mark.parametrize(("exercise_id", "path"), variants(), ids=[name_of(e, p) for e, p in variants()])
def test_variant_is_judged_as_stated(graded, exercise_id, path):
    expect, _ = parse(path)
    report = graded[name_of(exercise_id, path)]
    (part,) = [p for p in report["exercises"] if p.get("exercise") == exercise_id]
    for q in part["questions"]:
        want = expect[q["name"]]
        ok = {"full": q["score"] == q["max_score"], "zero": q["score"] == 0, "less": q["score"] < q["max_score"]}[want]
        # how the sandbox ran and what it measured, where the verdict is not the stated one
        assert ok, (q["name"], want, q["score"], q["message"], part["sandbox"], q.get("measured"))
        assert "checker could not" not in q["message"]


def _self_check(exercise_id: str, cells: list[str]) -> dict[str, float]:
    """tk.check on the variant's cells run in one namespace, as a kernel would (top to bottom)."""
    import signal

    from IPython.core.interactiveshell import InteractiveShell

    def interrupt(signum, frame):  # what a student does to a cell that never ends
        raise KeyboardInterrupt

    shell = InteractiveShell.instance()
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        shell.reset(new_session=True)
        for cell in cells:
            if "tk.check(" in cell:
                continue
            signal.setitimer(signal.ITIMER_REAL, 8)  # no corpus cell needs more; a loop that never ends is cut
            try:
                shell.run_cell(cell, store_history=True)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        results = ex.check(exercise_id, shell.user_ns, seed=5)
    finally:
        signal.signal(signal.SIGALRM, old)
        InteractiveShell.clear_instance()
    return {r["name"]: r["score"] for r in results}


@pytest.mark.skipif(not ISO.namespaces, reason="needs bubblewrap")
@pytest.mark.parametrize(("exercise_id", "path"), [v for v in variants()
                                                   if all(x == "full" for x in parse(v[1])[0].values())],
                         ids=[name_of(e, p) for e, p in variants() if all(x == "full" for x in parse(p)[0].values())])
def test_self_check_agrees_with_the_grade_on_correct_variants(graded, exercise_id, path):
    _, cells = parse(path)
    (part,) = [p for p in graded[name_of(exercise_id, path)]["exercises"] if p.get("exercise") == exercise_id]
    assert _self_check(exercise_id, cells) == {q["name"]: q["score"] for q in part["questions"]}


sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
