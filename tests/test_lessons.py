"""What every lesson notebook promises a student: predict before running, the program in view,
no table printed twice, no device rows on a CPU lesson, the lab's caveat kept."""

import pathlib
import re

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


def _book(path: pathlib.Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _outputs(book: nbformat.NotebookNode) -> list[str]:
    texts = []
    for cell in book.cells:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            texts.append("".join(text) if isinstance(text, list) else text)
    return texts


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_each_lesson_asks_for_a_prediction_before_a_cell_runs(path):
    cells = _book(path).cells
    asks = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and re.search(r"\bpredict", c.source, re.I)]
    assert any(i + 1 < len(cells) and any(c.cell_type == "code" for c in cells[i + 1:i + 3]) for i in asks), path.name


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_cuda_rows_and_no_table_printed_twice(path):
    outputs = [o for o in _outputs(_book(path)) if o.strip()]
    assert not any("CUDA is not available" in o for o in outputs), path.name
    tables = [o for o in outputs if "\n" in o.strip() and ("fact" in o.split("\n")[0] or "node " in o.split("\n")[0])]
    assert len(tables) == len(set(tables)), f"{path.name} prints the same table twice"


@pytest.mark.parametrize("name", ["04_retention", "05_inplace", "06_app_references", "07_hooks_offload",
                                  "08_recompute", "09_budget", "11_build_a_tape"])
def test_lessons_4_to_9_and_the_tape_define_the_program_they_study(name):
    code = [c.source for c in _book(ROOT / "notebooks" / f"{name}.ipynb").cells if c.cell_type == "code"]
    assert any(re.search(r"^def \w+\(", src, re.M) for src in code), name
    assert not any(re.search(r"scenarios\.(?!training_setup)\w+\(\"cpu\"\)\s*$", src, re.M) for src in code), name


def test_the_lab_appears_once_and_keeps_the_teaching_view_caveat():
    shown = [p.name for p in LESSONS if any(c.cell_type == "code" and re.search(r"^tk\.lab\(\)\s*$", c.source, re.M)
                                            for c in _book(p).cells)]
    assert shown == ["02_small_trace.ipynb"], shown
    book = _book(ROOT / "notebooks" / "02_small_trace.ipynb")
    prose = " ".join(c.source for c in book.cells if c.cell_type == "markdown")
    assert "not memory evidence" in prose and "Predict" in prose
    assert any("not memory evidence" in o for o in _outputs(book))


def test_no_lesson_speaks_of_the_issue_or_prints_library_source():
    for path in LESSONS:
        book = _book(path)
        prose = " ".join(c.source for c in book.cells if c.cell_type == "markdown")
        assert not re.search(r"\bthe issue\b", prose, re.I), path.name
        assert not any(len(o.splitlines()) > 25 and "def " in o for o in _outputs(book)), f"{path.name} prints source"
