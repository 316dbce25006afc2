"""Cheats cheaper than the answer (issue 36): a resubmission fitted to its own feedback, a lookup table
built from a classmate's Gradescope results, and the package's own files earn nothing they did not
compute. The fast tests check the seed and the messages on real judges; the `grading` ones grade real
notebooks in real sandboxes (the fitted table is first shown to be right for the inputs it was fitted
to, so the test would fail if the next submission drew those inputs again)."""

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from tracekit.exercises import draw_inputs, get, judge_all, probe_all
from tracekit.grading.gradebook import write_from
from tracekit.grading.grader import Options, content_digest, grade_all, student_seed
from tracekit.grading.submission import read

ROOT = Path(__file__).resolve().parent.parent
REF03 = ROOT / "solutions" / "ex03_storage.ipynb"
SECRET = b"s" * 32


def fitted_cell(seed: int) -> str:
    """What a student who read her feedback (seed and all) could write: a table of the truth for the
    inputs that seed drew, worked out by the instructor's own judges, and 0 for anything else."""
    from tracekit.exercises.judges.ex03 import truth_slice, truth_views

    inputs = draw_inputs(get("ex03"), seed)
    slices = {f"{c['n']},{c['k']},{c['dtype']}": truth_slice(c) for c in inputs["q1"]["cases"]}
    views = {f"{c['n']},{c['dtype']}": truth_views(c) for c in inputs["q2"]["cases"]}
    return (f"SLICES = {slices!r}\nVIEWS = {views!r}\n\n"
            "def pinned_bytes(n, k, dtype):\n"
            "    return SLICES.get(f'{n},{k},{str(dtype).replace(\"torch.\", \"\")}', 0)\n\n"
            "def visible_and_pinned(n, dtype):\n"
            "    return VIEWS.get(f'{n},{str(dtype).replace(\"torch.\", \"\")}', [0, 0])\n")


def with_last_cell(base: Path, source: str) -> nbformat.NotebookNode:
    book = nbformat.read(base, as_version=4)
    book.cells.append(nbformat.v4.new_code_cell(source))
    return book


# ---- fast: the seed is a function of the notebook's code, the messages name no drawn input ----------

def test_the_seed_follows_the_code_not_the_outputs_or_the_prose(tmp_path):
    book = nbformat.read(REF03, as_version=4)
    nbformat.write(book, tmp_path / "a.ipynb")
    prose = nbformat.read(REF03, as_version=4)
    prose.cells.insert(0, nbformat.v4.new_markdown_cell("my notes"))
    for cell in prose.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text="printed\n")]
            cell.execution_count = 7
    nbformat.write(prose, tmp_path / "b.ipynb")
    changed = with_last_cell(REF03, "x = 1  # one more line of code")
    nbformat.write(changed, tmp_path / "c.ipynb")
    digests = [content_digest(read(tmp_path / f"{n}.ipynb", "ann").code_cells) for n in "abc"]
    assert digests[0] == digests[1] != digests[2]
    seeds = {student_seed(SECRET, "ex03", "ann", d) for d in digests}
    assert len(seeds) == 2
    assert student_seed(SECRET, "ex03", "ann", digests[0]) != student_seed(SECRET, "ex03", "bob", digests[0])
    # cells split differently are different code (the digest frames each cell)
    assert content_digest(["a", "bc"]) != content_digest(["ab", "c"]) != content_digest(["abc"])


def test_messages_about_drawn_cases_name_no_drawn_input():
    """A wrong answer on every drawn case: the message says what to fix and how many cases, never n, k or
    the layer sizes that were drawn (a resubmission draws others, so they would only feed a table)."""
    for seed in (1, 2, 3):
        inputs = draw_inputs(get("ex03"), seed)
        ns: dict = {}
        exec("def pinned_bytes(n, k, dtype):\n    return k\n\n"  # noqa: S102 - a wrong answer
             "def visible_and_pinned(n, dtype):\n    return [1, 1]\n", ns)
        results = judge_all(get("ex03"), probe_all(get("ex03"), ns, inputs), inputs)
        assert [r["score"] for r in results] == [0, 0]
        for r, q in zip(results, ("q1", "q2")):
            assert f"of the {len(inputs[q]['cases'])} drawn cases" in r["message"], r["message"]
            drawn = {str(c["n"]) for c in inputs[q]["cases"]}
            assert not any(f"n={n}" in r["message"] or f" {n}," in r["message"] for n in drawn), r["message"]
    inputs = draw_inputs(get("ex09"), 5)
    ns = {}
    exec("def adam_state_bytes(model):\n    return 1\n", ns)  # noqa: S102
    (r,) = [r for r in judge_all(get("ex09"), probe_all(get("ex09"), ns, inputs), inputs) if r["name"] == "q2"]
    assert r["score"] == 0 and "drawn cases" in r["message"]
    assert not any(str(c["sizes"]) in r["message"] for c in inputs["q2"]["cases"]), r["message"]


def test_the_fitted_table_is_right_for_the_inputs_it_was_fitted_to():
    """Without a new draw the cheat works: the table scores full on its own feedback's inputs (so the
    grading test below measures the defence, not a table that was wrong anyway)."""
    seed = student_seed(SECRET, "ex03", "ann", "first submission")
    ns: dict = {}
    exec(fitted_cell(seed), ns)  # noqa: S102
    inputs = draw_inputs(get("ex03"), seed)
    assert [r["score"] for r in judge_all(get("ex03"), probe_all(get("ex03"), ns, inputs), inputs)] == [2, 2]
    other = draw_inputs(get("ex03"), student_seed(SECRET, "ex03", "ann", "second submission"))
    assert [r["score"] for r in judge_all(get("ex03"), probe_all(get("ex03"), ns, other), other)] == [0, 0]


# ---- grading: real sandboxes -------------------------------------------------------------------------

@pytest.mark.grading
def test_a_resubmission_fitted_to_its_own_feedback_earns_nothing(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    shutil.copy(REF03, subs / "ann.ipynb")
    options = Options(timeout=120, memory_mb=3072, cell_timeout=30, secret=SECRET)
    (first,) = grade_all(subs, out, options, progress=lambda line: None)
    write_from([out], out)  # the feedback, as `tracekit grade` writes it after grading
    assert first["score"] == 4
    seed = first["exercises"][0]["seed"]
    assert f"seed {seed}" in (out / "feedback" / "ann.md").read_text(encoding="utf-8")  # what she reads
    fitted = with_last_cell(REF03, fitted_cell(seed))  # the answers replaced by a table
    fitted.cells.append(nbformat.v4.new_code_cell(  # inside the sandbox: no judges, and tk.check knows it is graded
        "import tracekit.exercises.sealed as s\nassert s.being_graded() and not s.judges_here()\n"
        "assert tk.check('ex03').note == 'The self-check does not run here: this notebook is being graded.'"))
    nbformat.write(fitted, subs / "ann.ipynb")
    lines: list[str] = []
    (second,) = grade_all(subs, out, options, progress=lines.append)
    assert any(line.startswith("regrading ann: changed") for line in lines), lines
    part = second["exercises"][0]
    assert part["seed"] != seed and second["score"] == 0, part["questions"]
    assert not part.get("cell_errors"), part["cell_errors"]
    assert all("drawn cases" in q["message"] for q in part["questions"])
    (again,) = grade_all(subs, out, Options(**{**options.__dict__, "force": True}), progress=lambda line: None)
    assert again["exercises"][0]["seed"] == part["seed"] and again["score"] == 0  # a function of the notebook


@pytest.mark.grading
def test_a_classmates_gradescope_results_are_no_lookup_table(tmp_path):
    """Two students submit to the same Gradescope bundle (one secret): each draws inputs of her own
    (named by submission_metadata.json), so bob's table built from ann's results earns nothing, while
    the same notebook under one name is graded the same on every run."""
    from tracekit.grading.autograder import METADATA, grade_submission, student_name
    from tracekit.grading.autograder import SECRET as SECRET_FILE

    def submit(user: dict, book: nbformat.NotebookNode) -> dict:
        root = tmp_path / user["email"]
        shutil.rmtree(root, ignore_errors=True)
        (root / "submission").mkdir(parents=True)
        (root / "source").mkdir()
        (root / "source" / SECRET_FILE).write_bytes(SECRET.hex().encode())
        nbformat.write(book, root / "submission" / "ex03.ipynb")
        (root / METADATA).write_text(json.dumps({"id": 1, "users": [user], "assignment": {"id": 9}}))
        config = {"exercises": ["ex03"], "timeout": 120, "memory_mb": 3072, "secret_file": SECRET_FILE}
        return grade_submission(root, config)

    ann = {"email": "ann@school.edu", "id": "101", "name": "Ann"}
    bob = {"email": "bob@school.edu", "id": "102", "name": "Bob"}
    honest = nbformat.read(REF03, as_version=4)
    doc = submit(ann, honest)
    assert doc["score"] == 4, doc["output"]
    (tmp_path / "who").mkdir()
    (tmp_path / "who" / METADATA).write_text(json.dumps({"users": [ann]}))
    nbformat.write(honest, tmp_path / "who" / "ann.ipynb")
    # the worst case: bob knows exactly which inputs ann's notebook drew (the bundle's secret is its hex text)
    ann_seed = student_seed(SECRET.hex().encode(), "ex03", student_name(tmp_path / "who")[0],
                            content_digest(read(tmp_path / "who" / "ann.ipynb", "ann").code_cells))
    doc = submit(bob, with_last_cell(REF03, fitted_cell(ann_seed)))  # ann's cases, worked out for her notebook
    assert doc["score"] == 0, [t["output"] for t in doc["tests"]]


def test_gradescope_names_each_student_from_the_submission_metadata(tmp_path):
    from tracekit.grading.autograder import METADATA, STUDENT, student_name

    def name(doc) -> tuple[str, str | None]:
        (tmp_path / METADATA).write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return student_name(tmp_path)

    ann = name({"users": [{"email": "ann@school.edu", "id": "101", "name": "Ann"}]})
    bob = name({"users": [{"email": "bob@school.edu", "id": "102", "name": "Bob"}]})
    group = name({"users": [{"email": "bob@school.edu", "id": "102"}, {"email": "ann@school.edu", "id": "101"}]})
    swapped = name({"users": [{"email": "ann@school.edu", "id": "101"}, {"email": "bob@school.edu", "id": "102"}]})
    by_mail = name({"users": [{"email": "Ann@School.edu ", "name": "Ann"}]})
    assert ann[1] is None and len({ann[0], bob[0], group[0], by_mail[0]}) == 4
    assert group == swapped and ann == name({"users": [{"id": 101, "email": "other@x"}]})  # the id decides
    assert all(n[0].startswith("gs-") and n[0] != STUDENT for n in (ann, bob, group, by_mail))
    for broken in ("{", "[]", {"users": []}, {"users": [{"email": ""}]}, {"users": "ann"}):
        got, note = name(broken)
        assert got == STUDENT and METADATA in note
    (tmp_path / METADATA).unlink()
    assert student_name(tmp_path)[0] == STUDENT
