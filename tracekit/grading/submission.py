"""Reading a submission (trusted side): parse the notebook, recognise the exercise, list its code."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import TracekitError
from ..exercises import IDS

_CHECK_CALL = re.compile(r"""(?:tk|tracekit)\.check\(\s*["'](ex\d\d)["']""")


class SubmissionError(TracekitError, ValueError):
    """The file cannot be graded as a notebook (empty, corrupt, or no recognisable exercise)."""


@dataclass
class Submission:
    """One student's notebook, as data: which exercise, and its code cells in file order."""

    student: str
    path: Path
    exercise: str
    code_cells: list[str]


def read(path: Path, student: str) -> Submission:
    """Parse a notebook file without running anything; SubmissionError says what is wrong."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SubmissionError(f"cannot read {path.name}: {err}") from err
    if not raw.strip():
        raise SubmissionError(f"{path.name} is empty")
    try:
        book = json.loads(raw)
    except ValueError as err:
        raise SubmissionError(f"{path.name} is not a valid notebook (JSON error: {err})") from err
    if not isinstance(book, dict) or not isinstance(book.get("cells"), list):
        raise SubmissionError(f"{path.name} is not a Jupyter notebook (no list of cells)")
    cells = []
    for cell in book["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            cells.append("".join(source) if isinstance(source, list) else str(source))
    return Submission(student, path, identify(book, cells), cells)


def identify(book: dict, code_cells: list[str]) -> str:
    """The exercise id, from the notebook's metadata or else its self-check call (never the file name)."""
    meta = book.get("metadata")
    tag = meta.get("tracekit") if isinstance(meta, dict) else None
    found = tag.get("exercise") if isinstance(tag, dict) else None
    if found in IDS:
        return found
    calls = {m for src in code_cells for m in _CHECK_CALL.findall(src) if m in IDS}
    if len(calls) == 1:
        return calls.pop()
    raise SubmissionError("cannot tell which exercise this is: keep the notebook's metadata, or its "
                          'final tk.check("exNN") cell')


def discover(root: Path) -> list[tuple[str, Path]]:
    """(student, notebook) pairs: `<student>.ipynb` files, `<student>/` folders, or nbgrader's
    `submitted/<student>/<assignment>/`."""
    if (root / "submitted").is_dir():
        root = root / "submitted"
    found: list[tuple[str, Path]] = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix == ".ipynb":
            found.append((entry.stem, entry))
        elif entry.is_dir():
            notebooks = sorted(p for p in entry.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            found.extend((entry.name, p) for p in notebooks)
    return found
