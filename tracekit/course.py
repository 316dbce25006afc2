"""The course a student works in: the lessons (notebooks/) and the exercises (exercises/), found in
this install (a wheel carries them as tracekit/_course/) or in the source checkout, and copied into a
folder of the student's without ever overwriting a notebook the student changed.

What makes a notebook the student's: its cells' sources (a cell edited, added, removed or moved). What
does not: metadata (JupyterLab rewrites the kernelspec when it opens a notebook), outputs and execution
counts (running a lesson), cell ids and cell metadata (collapsing an output)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CourseError

FOLDERS = {"notebooks": "[0-9]*.ipynb", "exercises": "ex*.ipynb"}  # the course's folders, what each holds
MANIFEST = ".tracekit-course.json"  # in a student's course folder: each file as it was copied ({"file", "cells"})
FIRST_LESSON = "notebooks/01_forward_values.ipynb"
# the kernelspec JupyterLab writes into a notebook it opens on ipykernel's python3 kernel: the course ships it,
# so opening a lesson changes nothing in it
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
PACKAGE = Path(__file__).resolve().parent


def checkout_root() -> Path | None:
    """The source checkout this tracekit runs from (the folder with its pyproject.toml), or None."""
    root = PACKAGE.parent
    toml = root / "pyproject.toml"
    try:
        is_checkout = toml.is_file() and 'name = "tracekit"' in toml.read_text(encoding="utf-8")
    except OSError:
        return None
    return root if is_checkout and (root / "notebooks").is_dir() else None


def course_source() -> Path:
    """The folder that holds notebooks/ and exercises/: the installed course, else the checkout's."""
    installed = PACKAGE / "_course"
    if all((installed / name).is_dir() for name in FOLDERS):
        return installed
    root = checkout_root()
    if root is not None and all((root / name).is_dir() for name in FOLDERS):
        return root
    raise CourseError(f"this tracekit ({PACKAGE}) carries no course: reinstall it from a wheel or a source "
                      "checkout (pip install tracekit / pip install -e .)")


def course_files() -> dict[str, Path]:
    """Every file of the course: its path in a course folder ('notebooks/01_….ipynb') -> where it is now."""
    source = course_source()
    return {f"{name}/{path.name}": path for name, pattern in FOLDERS.items()
            for path in sorted((source / name).glob(pattern))}


@dataclass
class CourseCopy:
    """What `copy_course` did with each file of the course (paths relative to the folder)."""

    folder: Path
    added: list[str] = field(default_factory=list)  # not there before
    updated: list[str] = field(default_factory=list)  # there as copied before, unedited, and the course changed
    kept: list[str] = field(default_factory=list)  # there and changed by the student (or not from tracekit)
    unchanged: list[str] = field(default_factory=list)  # there and already the course's version

    def summary(self) -> str:
        """One line per kind of outcome, naming the files."""
        lines = [f"course in {self.folder}:"]
        for label, names in (("added", self.added), ("updated (you had not changed them)", self.updated),
                             ("kept your version of", self.kept)):
            if names:
                lines.append(f"  {label} ({len(names)}): {', '.join(names)}")
        if self.unchanged:
            lines.append(f"  already up to date: {len(self.unchanged)} files")
        return "\n".join(lines)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cells_digest(data: bytes) -> str | None:
    """The hash of a notebook's cells as the student wrote them (each cell's type and source, in order),
    blind to metadata, outputs, execution counts, cell ids and cell metadata; None if `data` is no notebook."""
    try:
        book = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    cells = book.get("cells") if isinstance(book, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        return None
    text = [[str(c.get("cell_type")), "".join(s) if isinstance(s := c.get("source", ""), list) else str(s)]
            for c in cells]
    return _digest(json.dumps(text, ensure_ascii=False).encode("utf-8"))


@dataclass(frozen=True)
class Copied:
    """One file as a copy put it in the course folder: its bytes' hash, and its cells' (None if unknown)."""

    file: str
    cells: str | None

    @classmethod
    def of(cls, data: bytes) -> Copied:
        """What to record for a file copied with these bytes."""
        return cls(_digest(data), cells_digest(data))

    @classmethod
    def recorded(cls, entry: object) -> Copied | None:
        """A manifest entry: {"file", "cells"}, or the bare file hash an older tracekit recorded (its cells
        looked up among the versions that tracekit shipped)."""
        if isinstance(entry, str):
            from .course_history import CELLS_OF_SHIPPED

            return cls(entry, CELLS_OF_SHIPPED.get(entry))
        if isinstance(entry, dict) and isinstance(entry.get("file"), str):
            cells = entry.get("cells")
            return cls(entry["file"], cells if isinstance(cells, str) else None)
        return None

    def entry(self) -> dict[str, str | None]:
        """The manifest entry."""
        return {"file": self.file, "cells": self.cells}


def _read_manifest(folder: Path) -> dict[str, Copied]:
    try:
        found = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): c for k, v in found.items() if (c := Copied.recorded(v)) is not None}


def _outcome(current: bytes, course: bytes, copied: Copied | None) -> str:
    """What to do with a file already in the folder: "unchanged" (keep it, it has the course's cells),
    "updated" (replace it: the student never changed its cells), or "kept" (hers)."""
    if current == course:
        return "unchanged"
    if copied is not None and _digest(current) == copied.file:
        return "updated"  # exactly as copied
    cells = cells_digest(current)
    if cells is not None and cells == cells_digest(course):
        return "unchanged"  # run or reopened, not edited, and the course's cells are the same: her outputs stay
    if cells is not None and copied is not None and cells == copied.cells:
        return "updated"  # run or reopened, not edited
    return "kept"


def copy_course(folder: Path) -> CourseCopy:
    """Copy the lessons and exercises into `folder` (made if missing). A notebook already there is replaced
    only when its cells are what an earlier copy put there (outputs and metadata do not count); a notebook
    whose cells the student changed is kept."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise CourseError(f"{folder} is a file, not a folder: give a folder for the course")
    files = course_files()
    manifest = _read_manifest(folder)
    done = CourseCopy(folder)
    try:
        for name in FOLDERS:
            (folder / name).mkdir(parents=True, exist_ok=True)
        for rel, source in files.items():
            data = source.read_bytes()
            target = folder / rel
            if target.is_dir():
                raise CourseError(f"{target} is a folder: move it away to receive the course's {rel}")
            if not target.exists():
                done.added.append(rel)
            else:
                current = target.read_bytes()
                outcome = _outcome(current, data, manifest.get(rel))
                if outcome != "updated":
                    getattr(done, outcome).append(rel)
                    if outcome == "unchanged":
                        manifest[rel] = Copied(_digest(current), cells_digest(current))
                    continue
                done.updated.append(rel)
            partial = target.with_name(f".{target.name}.partial")
            partial.write_bytes(data)
            os.replace(partial, target)
            manifest[rel] = Copied.of(data)
        entries = {rel: copied.entry() for rel, copied in manifest.items()}
        (folder / MANIFEST).write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except PermissionError as err:
        raise CourseError(f"cannot write the course into {folder}: {err.strerror} ({err.filename})") from None
    except OSError as err:
        raise CourseError(f"cannot write the course into {folder}: {err.strerror or err}") from None
    return done


def package_source(dest: Path) -> Path:
    """A source tree of this installed tracekit in `dest` (pyproject.toml, README.md, tracekit/), made
    from the install and the build files its wheel carries: what the autograder bundle rebuilds its
    wheel from. Returns `dest`."""
    shipped = PACKAGE / "_course" / "source"
    if not all((shipped / name).is_file() for name in ("pyproject.toml", "README.md")):
        raise CourseError(f"this tracekit ({PACKAGE}) carries no build files: run from a source checkout "
                          "or install tracekit from its wheel")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(shipped / name, dest / name)
    shutil.copytree(PACKAGE, dest / "tracekit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_course"))
    return dest


def has_course(folder: Path) -> bool:
    """Whether `folder` holds a course (a notebooks/ folder with a lesson)."""
    return any((Path(folder) / "notebooks").glob(FOLDERS["notebooks"]))


def lab_command(python: str, root: Path, extra: list[str], as_root: bool | None = None) -> list[str]:
    """The JupyterLab command for a course folder: served from its root (lessons and exercises both
    reachable, so the links between them work), the first lesson open, no news pop-up over the first
    lesson, and `--allow-root` when run as root (`as_root`: default, whether this process's euid is 0)."""
    command = [python, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", *extra]
    given = {a.split("=", 1)[0] for a in extra}
    if (root / FIRST_LESSON).is_file() and "--LabApp.default_url" not in given:
        command.append(f"--LabApp.default_url=/lab/tree/{FIRST_LESSON}")
    if "--LabApp.news_url" not in given:
        command.append("--LabApp.news_url=None")  # JupyterLab then never asks to fetch news
    if as_root is None:
        as_root = getattr(os, "geteuid", lambda: -1)() == 0
    if as_root and not given & {"--allow-root", "--ServerApp.allow_root"}:
        command.append("--allow-root")  # a container's or a hub image's root: Jupyter refuses without it
    return command
