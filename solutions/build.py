"""Write the student exercise notebooks (exercises/, stubs only) and the reference
notebooks (solutions/, answers filled in) from the exercise definitions: every exercise
module found (`tracekit.exercises.IDS`), its questions' prompts and stubs, and its answers here;
then the self-check's sealed key (tracekit/exercises/selfcheck_key.json) from the judges, keeping
its salt (`--new-salt` draws another).

    python solutions/build.py [--new-salt]

Run it after changing a question in tracekit/exercises/ or an answer in solutions/answers.py.
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from answers import SOLUTIONS  # noqa: E402

import tracekit.exercises as ex  # noqa: E402
from tracekit.course import KERNELSPEC  # noqa: E402
from tracekit.exercises.base import lesson_link  # noqa: E402


def _imports(exercise: ex.Exercise) -> str:
    """The first code cell: torch and tracekit (lint-clean in the reference notebook too)."""
    used = any("torch" in SOLUTIONS[exercise.id][q.name] for q in exercise.questions)
    return "import torch" + ("" if used else "  # noqa: F401 - for your answers") + "\n\nimport tracekit as tk"


def notebook(exercise: ex.Exercise, with_answers: bool) -> nbformat.NotebookNode:
    """One exercise as a notebook: intro, one prompt + answer cell per question, the self-check."""
    cells = [
        new_markdown_cell(
            f"# {exercise.id} · {exercise.title}\n\n"
            f"Goes with the {lesson_link(exercise.lesson)}. Fill in every "
            f"answer cell, run the "
            f"notebook top to bottom, then run the last cell to check yourself. {exercise.max_score} points.\n\n"
            "Your instructor grades this notebook by running it from the top in a fresh sandbox, on inputs "
            "drawn for you at grading time, so an answer has to be right in general, not just for one example, "
            "and has to work when the notebook runs top to bottom. Keep each answer under the name it is given. "
            "A question about a table of cases checks every case. Memory questions are measured outside your "
            "notebook's process, on a larger run than the self-check's."
            + (f"\n\n{exercise.intro}" if exercise.intro else "")
        ),
        new_code_cell(_imports(exercise)),
    ]
    for q in exercise.questions:
        kind = "write code" if q.kind == "code" else "give a value"
        details = f"\n\n{q.details}" if q.details else ""
        cells.append(new_markdown_cell(f"**{q.name}** ({q.points} point{'s' if q.points > 1 else ''}, {kind}): "
                                       f"{q.prompt}.{details}\n\nAnswer in `{q.answer}`."))
        cells.append(new_code_cell(SOLUTIONS[exercise.id][q.name] if with_answers else q.starter))
    cells.append(new_markdown_cell("### Check yourself"))
    cells.append(new_code_cell(f'tk.check("{exercise.id}")'))
    for i, cell in enumerate(cells):  # stable ids: a rebuild changes only what changed
        cell.id = f"{exercise.id}-cell-{i}"
    book = new_notebook(cells=cells)
    book.metadata["kernelspec"] = dict(KERNELSPEC)
    book.metadata["tracekit"] = {"exercise": exercise.id}
    return book


def main() -> int:
    for exercise_id in ex.IDS:
        exercise = ex.get(exercise_id)
        nbformat.write(notebook(exercise, False), ROOT / "exercises" / f"{exercise.notebook}.ipynb")
        nbformat.write(notebook(exercise, True), HERE / f"{exercise.notebook}.ipynb")
        print("wrote", exercise.notebook)
    write_key(new_salt="--new-salt" in sys.argv[1:])
    return 0


def write_key(new_salt: bool = False) -> None:
    """The sealed key of the student install's self-check, built from the judges (same salt unless new)."""
    import json

    from tracekit.exercises import sealed
    from tracekit.exercises.judges.sealing import build_key

    salt = None if new_salt or not sealed.KEY_FILE.exists() else next(iter(sealed.load_key().values()))["salt"]
    key = build_key(SOLUTIONS, salt)
    sealed.KEY_FILE.write_text(json.dumps(key, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sealed.load_key.cache_clear()
    print("wrote", sealed.KEY_FILE.relative_to(ROOT))


if __name__ == "__main__":
    sys.exit(main())
