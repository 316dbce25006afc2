"""Reading submissions (trusted side): find them without following links, open only regular
files of bounded size, parse the notebook as data, recognise the exercise, list its code."""

from __future__ import annotations

import json
import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SubmissionError
from ..exercises import IDS

_CHECK_CALL = re.compile(r"""(?:tk|tracekit)\.check\(\s*["'](ex\d\d)["']""")
MAX_NOTEBOOK_BYTES = 20 << 20  # a notebook of exercises is a few hundred kB; outputs are not needed
MAX_DEPTH = 8  # folders below a student's folder that are searched


@dataclass
class Submission:
    """One student's notebook, as data: which exercise, and its code cells in file order."""

    student: str
    path: Path
    exercise: str
    code_cells: list[str]
    warnings: list[str] = field(default_factory=list)


def read_regular(path: Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a regular file opened without following a symbolic link, at most `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == 40:  # ELOOP: the last component is a symbolic link
            raise SubmissionError(f"{path.name} is a symbolic link: submit the notebook itself") from err
        raise SubmissionError(f"cannot read {path.name}: {err.strerror}") from err
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"{path.name} is not a regular file (a folder, pipe or device): not graded")
        if info.st_size > limit:
            raise SubmissionError(f"{path.name} is {info.st_size / 2**20:.0f} MB, more than the {limit / 2**20:.0f} MB "
                                  "a notebook may have: clear its outputs and submit again")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise SubmissionError(f"{path.name} grew past {limit / 2**20:.0f} MB while being read: not graded")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read(path: Path, student: str, limit: int = MAX_NOTEBOOK_BYTES) -> Submission:
    """Parse a notebook file without running anything; SubmissionError says what is wrong."""
    raw_bytes = read_regular(path, limit)
    try:
        raw = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SubmissionError(f"{path.name} is not UTF-8 text: {err}") from err
    if not raw.strip():
        raise SubmissionError(f"{path.name} is empty")
    try:
        book = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise SubmissionError(f"{path.name} is not a valid notebook (JSON error: {str(err)[:200]})") from err
    if not isinstance(book, dict) or not isinstance(book.get("cells"), list):
        raise SubmissionError(f"{path.name} is not a Jupyter notebook (no list of cells)")
    cells, warnings = [], []
    for n, cell in enumerate(book["cells"], 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            cells.append("".join(source))
        elif isinstance(source, str):
            cells.append(source)
        else:
            cells.append("")
            warnings.append(f"cell {n} has no text source ({type(source).__name__}): treated as empty")
    return Submission(student, path, identify(book, cells), cells, warnings)


def identify(book: dict, code_cells: list[str]) -> str:
    """The exercise id, from the notebook's metadata or else its self-check call (never the file name)."""
    meta = book.get("metadata")
    tag = meta.get("tracekit") if isinstance(meta, dict) else None
    found = tag.get("exercise") if isinstance(tag, dict) else None
    if isinstance(found, str) and found in IDS:
        return found
    calls = {m for src in code_cells for m in _CHECK_CALL.findall(src) if m in IDS}
    if len(calls) == 1:
        return calls.pop()
    raise SubmissionError("cannot tell which exercise this is: keep the notebook's metadata, or its "
                          'final tk.check("exNN") cell')


def student_name(raw: str) -> str:
    """The name a student is listed under: Unicode NFC, control characters removed."""
    name = unicodedata.normalize("NFC", raw)
    return "".join(ch for ch in name if unicodedata.category(ch)[0] != "C").strip() or "unnamed"


@dataclass
class Found:
    """What discovery found: notebooks per student, and what could not be taken (per student)."""

    notebooks: dict[str, list[Path]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)

    def add(self, raw: str, path: Path | None, problem: str | None = None) -> None:
        """Record a notebook (or a problem) for the student whose raw name this is."""
        name = student_name(raw)
        self.notebooks.setdefault(name, [])
        self.problems.setdefault(name, [])
        if path is not None:
            self.notebooks[name].append(path)
        if problem:
            self.problems[name].append(problem)


def _walk(folder: Path, depth: int = 0) -> tuple[list[Path], list[str]]:
    """Notebooks under a student's folder, never following links or entering checkpoints."""
    found, problems = [], []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as err:
        return [], [f"{folder.name}/ cannot be listed: {err.strerror}"]
    for entry in entries:
        if entry.name.startswith(".") or entry.name == ".ipynb_checkpoints":
            continue
        if entry.is_symlink():
            if entry.name.endswith(".ipynb"):
                problems.append(f"{entry.name} is a symbolic link: not graded")
            continue
        if entry.is_dir(follow_symlinks=False):
            if depth < MAX_DEPTH:
                more, why = _walk(Path(entry.path), depth + 1)
                found += more
                problems += why
        elif entry.name.endswith(".ipynb"):
            found.append(Path(entry.path))  # read() refuses what is not a regular file
    return found, problems


def discover_all(root: Path) -> Found:
    """Every student of `<student>.ipynb` files, `<student>/` folders or nbgrader's
    `submitted/<student>/<assignment>/`, with what could not be taken."""
    sub = root / "submitted"
    if sub.is_dir() and not sub.is_symlink():
        root = sub
    found = Found()
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if entry.is_symlink():
            stem = entry.name[:-6] if entry.name.endswith(".ipynb") else entry.name
            found.add(stem, None, f"{entry.name} is a symbolic link: not graded")
        elif entry.is_dir(follow_symlinks=False):
            notebooks, problems = _walk(Path(entry.path))
            if not notebooks and not problems:
                problems = [f"{entry.name}/ holds no notebook"]
            for p in notebooks:
                found.add(entry.name, p)
            for why in problems:
                found.add(entry.name, None, why)
        elif entry.name.endswith(".ipynb"):
            found.add(entry.name[:-6], Path(entry.path))
    raw_names: dict[str, set[str]] = {}
    for entry in os.scandir(root):
        stem = entry.name[:-6] if entry.name.endswith(".ipynb") else entry.name
        if not entry.name.startswith("."):
            raw_names.setdefault(student_name(stem), set()).add(stem)
    for name, raws in raw_names.items():
        if len(raws) > 1:
            found.add(name, None, "submissions under names that look the same (they differ only in Unicode "
                      f"normalisation): {', '.join(sorted(map(ascii, raws)))}; graded as one student")
    return found


def discover(root: Path) -> list[tuple[str, Path]]:
    """(student, notebook) pairs, as `discover_all` finds them (problems left out)."""
    found = discover_all(root)
    return [(s, p) for s in sorted(found.notebooks) for p in found.notebooks[s]]
