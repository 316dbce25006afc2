"""Reading submissions (trusted side): decide once, before anything is graded, who the students
are and which files are theirs; open every file through a folder descriptor opened once, without
following links; parse a notebook as data, recognise its exercise, list its code.

Identity: a student is the exact name of her file or folder. Names are never merged: one that
holds control or invisible characters, is not in Unicode NFC, holds a backslash, or looks like
another student's name (the same letters after case folding, NFKC and a table of common
look-alike letters) is *quarantined*: listed and graded under a visible escaped form
(`iv\\u0430n`), which no other name can produce, with a problem that says why.
"""

from __future__ import annotations

import contextlib
import hashlib
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
LAYOUTS = ("auto", "flat", "nbgrader")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# letters of other scripts that look like Latin ones (the common part of Unicode's confusables)
_LOOKALIKE = str.maketrans(
    "аеорсуххіјѕԁһӏԛԝвкмнтАВЕКМНОРСТХУІЈЅοανρτικυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧıɡ",
    "aeopcyxxijsdhlqwbkmhtabekmhopctxyijsoavptikuxabezhikmnoptyxig")


@dataclass
class Submission:
    """One student's notebook, as data: which exercise, and its code cells in file order."""

    student: str
    path: Path | Notebook
    exercise: str
    code_cells: list[str]
    warnings: list[str] = field(default_factory=list)
    release: str = ""  # the tracekit release the notebook says it was made for ("" if it does not say)


class Folder:
    """A folder of the submissions, opened once (its descriptor is what every read goes through)."""

    def __init__(self, fd: int, shown: str) -> None:
        self.fd = fd
        self.shown = shown

    def close(self) -> None:
        """Give the descriptor back."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(frozen=True)
class Notebook:
    """A notebook found by discovery: a file name inside a folder opened once, and the sha256 of
    the bytes discovery read. Reading it again goes through the same folder descriptor, never a path."""

    shown: str  # its path from the submissions folder, for messages (escaped where needed)
    folder: Folder = field(compare=False, repr=False)
    file: str = field(compare=False)  # its name inside `folder`
    sha256: str = field(compare=False)

    @property
    def name(self) -> str:
        """What a message calls it (the path from the submissions folder)."""
        return self.shown

    def __lt__(self, other: Notebook) -> bool:
        return self.shown < other.shown


def _read_fd(fd: int, shown: str, limit: int) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise SubmissionError(f"{shown} is not a regular file (a folder, pipe or device): not graded")
    if info.st_size > limit:
        raise SubmissionError(f"{shown} is {info.st_size / 2**20:.0f} MB, more than the {limit / 2**20:.0f} MB "
                              "a notebook may have: clear its outputs and submit again")
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise SubmissionError(f"{shown} grew past {limit / 2**20:.0f} MB while being read: not graded")
    return b"".join(chunks)


def _open_error(shown: str, err: OSError) -> SubmissionError:
    if err.errno == 40:  # ELOOP: the last component is a symbolic link
        return SubmissionError(f"{shown} is a symbolic link: submit the notebook itself")
    return SubmissionError(f"cannot read {shown}: {err.strerror}")


def read_regular(path: Path | Notebook, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a regular file opened without following a symbolic link, at most `limit`. A
    discovered Notebook is opened through its folder's descriptor, and must still hold the bytes
    discovery saw."""
    if isinstance(path, Notebook):
        try:
            fd = os.open(path.file, _FILE_FLAGS, dir_fd=path.folder.fd)
        except OSError as err:
            raise _open_error(path.shown, err) from err
        try:
            data = _read_fd(fd, path.shown, limit)
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() != path.sha256:
            raise SubmissionError(f"{path.shown} changed while the batch was running: not graded (rerun to grade "
                                  "it; the submissions folder must not change while grading)")
        return data
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError as err:
        raise _open_error(Path(path).name, err) from err
    try:
        return _read_fd(fd, Path(path).name, limit)
    finally:
        os.close(fd)


def _label(path: Path | Notebook) -> str:
    return path.shown if isinstance(path, Notebook) else Path(path).name


def read(path: Path | Notebook, student: str, limit: int = MAX_NOTEBOOK_BYTES) -> Submission:
    """Parse a notebook file without running anything; SubmissionError says what is wrong."""
    raw_bytes = read_regular(path, limit)
    try:
        raw = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SubmissionError(f"{_label(path)} is not UTF-8 text: {err}") from err
    if not raw.strip():
        raise SubmissionError(f"{_label(path)} is empty")
    try:
        book = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise SubmissionError(f"{_label(path)} is not a valid notebook (JSON error: {str(err)[:200]})") from err
    if not isinstance(book, dict) or not isinstance(book.get("cells"), list):
        raise SubmissionError(f"{_label(path)} is not a Jupyter notebook (no list of cells)")
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
    return Submission(student, path, identify(book, cells), cells, warnings, release_of(book))


def release_of(book: dict) -> str:
    """The tracekit release a notebook's metadata says it was made for ("" if it says none)."""
    meta = book.get("metadata")
    tag = meta.get("tracekit") if isinstance(meta, dict) else None
    release = tag.get("release") if isinstance(tag, dict) else None
    return release[:40] if isinstance(release, str) else ""


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




# ---- identity: names that cannot collide ----

def _escape(raw: str, all_non_ascii: bool) -> str:
    """An injective, visible form of a name: `\\` for a backslash, `\\uXXXX` for what cannot be shown."""
    out = []
    for ch in raw:
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch)[0] == "C" or (all_non_ascii and not ch.isascii()):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def skeleton(raw: str) -> str:
    """What a name looks like: invisible characters and accents dropped, case folded, NFKC, common
    look-alike letters of other scripts mapped to the Latin ones."""
    text = unicodedata.normalize("NFKD", raw.casefold())
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] not in ("C", "M") and not ch.isspace())
    return unicodedata.normalize("NFKC", text).translate(_LOOKALIKE).casefold()


def names(raws: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """raw name -> the student it is listed under, and why a name was quarantined (raw -> reason).
    The mapping is injective: a plain name has no backslash, an escaped one always has one."""
    groups: dict[str, list[str]] = {}
    for raw in dict.fromkeys(raws):
        groups.setdefault(skeleton(raw), []).append(raw)
    shown: dict[str, str] = {}
    why: dict[str, str] = {}
    for raw in dict.fromkeys(raws):
        reasons = []
        if any(unicodedata.category(ch)[0] == "C" for ch in raw):
            reasons.append("it holds invisible or control characters")
        if unicodedata.normalize("NFC", raw) != raw:
            reasons.append("it is not in Unicode NFC form")
        if "\\" in raw:
            reasons.append("it holds a backslash")
        others = [o for o in groups[skeleton(raw)] if o != raw]
        if others and not raw.isascii():
            reasons.append("it looks like another student's name (" + ", ".join(map(ascii, others)) + ")")
        if reasons:
            shown[raw] = _escape(raw, all_non_ascii=True)
            why[raw] = "; ".join(reasons)
        else:
            shown[raw] = raw
            if others:
                why[raw] = ""  # kept as it is, but told: another name looks like it
    return shown, why


# ---- discovery ----

@dataclass
class Found:
    """What discovery found: notebooks per student, what could not be taken (per student), the
    layout it read, what it passed over that is no student's, and the folders it holds open."""

    notebooks: dict[str, list[Notebook]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    layout: str = "flat"
    ignored: list[str] = field(default_factory=list)  # not a submission (a plain file at the top)
    folders: list[Folder] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)  # student -> the exact name found

    def close(self) -> None:
        """Close every folder descriptor discovery opened."""
        for folder in self.folders:
            folder.close()
        self.folders.clear()

    def __enter__(self) -> Found:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_dir(name: str, dir_fd: int) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    return False


def _take(folder: Folder, name: str, shown: str, limit: int, notebooks: list[Notebook],
          problems: list[str]) -> None:
    """Open, check and hash one notebook file of a folder (refused ones become problems)."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=folder.fd)
    except OSError as err:
        problems.append(str(_open_error(shown, err)))
        return
    try:
        data = _read_fd(fd, shown, limit)
    except SubmissionError as err:
        problems.append(str(err))
        return
    finally:
        os.close(fd)
    notebooks.append(Notebook(shown, folder, name, hashlib.sha256(data).hexdigest()))


def _walk(folder: Folder, limit: int, depth: int, found: Found, notebooks: list[Notebook],
          problems: list[str]) -> None:
    """Notebooks under a student's folder, never following links; every hidden, linked, odd or too
    deep entry that could be a notebook or a folder is a problem, not a silence."""
    try:
        entries = sorted(os.scandir(folder.fd), key=lambda e: e.name)
    except OSError as err:
        problems.append(f"{folder.shown}/ cannot be listed: {err.strerror}")
        return
    held = False
    for entry in entries:
        shown = f"{folder.shown}/{_escape(entry.name, False)}"
        is_dir = entry.is_dir(follow_symlinks=False)
        notebook = entry.name.endswith(".ipynb")
        if entry.is_symlink():
            problems.append(f"{shown} is a symbolic link: not followed")
        elif entry.name.startswith("."):
            if is_dir:
                problems.append(f"{shown}/ is a hidden folder: not searched" +
                                (" (Jupyter's autosaves)" if entry.name == ".ipynb_checkpoints" else ""))
            elif notebook:
                problems.append(f"{shown} is a hidden file (its name starts with '.'): not graded")
        elif is_dir:
            if depth >= MAX_DEPTH:
                problems.append(f"{shown}/ is more than {MAX_DEPTH} folders deep: not searched")
                continue
            try:
                fd = os.open(entry.name, _DIR_FLAGS, dir_fd=folder.fd)
            except OSError as err:
                problems.append(f"{shown}/ cannot be opened: {err.strerror}")
                continue
            sub = Folder(fd, shown)
            _walk(sub, limit, depth + 1, found, notebooks, problems)
            if sub not in found.folders:
                sub.close()
        elif notebook:
            before = len(notebooks)
            _take(folder, entry.name, shown, limit, notebooks, problems)
            held = held or len(notebooks) > before
    if held:
        found.folders.append(folder)


def _layout(root_fd: int, requested: str) -> str:
    """nbgrader's layout only when asked, or when the whole tree is one: the top holds nothing but a
    `submitted/` folder whose entries are all student folders of assignment folders."""
    if requested != "auto":
        return requested
    top = [n for n in os.listdir(root_fd) if not n.startswith(".")]
    if top != ["submitted"] or not _is_dir("submitted", root_fd):
        return "flat"
    fd = os.open("submitted", _DIR_FLAGS, dir_fd=root_fd)
    try:
        for student in os.listdir(fd):
            if not _is_dir(student, fd):
                return "flat"
            sfd = os.open(student, _DIR_FLAGS, dir_fd=fd)
            try:
                if not all(_is_dir(a, sfd) for a in os.listdir(sfd) if not a.startswith(".")):
                    return "flat"
            finally:
                os.close(sfd)
    finally:
        os.close(fd)
    return "nbgrader"


def discover_all(root: Path, layout: str = "auto", limit: int = MAX_NOTEBOOK_BYTES) -> Found:
    """Every student of `<student>.ipynb` files and `<student>/` folders (layout "flat"), or of
    nbgrader's `submitted/<student>/<assignment>/` ("nbgrader"; "auto" picks it only when the whole
    tree is one), or the one notebook `root` is; with what could not be taken, per student. Each
    notebook is read and hashed now; later reads go through the folder descriptors kept open here
    (close them with `Found.close`)."""
    if layout not in LAYOUTS:
        raise SubmissionError(f"--layout takes one of {', '.join(LAYOUTS)}, not {layout!r}")
    root = Path(root)
    found = Found()
    single = None
    try:
        if root.is_file() and root.suffix == ".ipynb":
            single, root = root.name, root.parent
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise SubmissionError(f"no such folder or notebook: {root} ({err.strerror})") from err
    top = Folder(root_fd, "")
    try:
        found.layout = "single" if single else _layout(root_fd, layout)
        if found.layout == "nbgrader":
            try:
                fd = os.open("submitted", _DIR_FLAGS, dir_fd=root_fd)
            except OSError as err:
                raise SubmissionError(f"--layout nbgrader: {root}/submitted/ cannot be opened ({err.strerror})") \
                    from err
            top.close()
            top = Folder(fd, "submitted")
        _discover_top(top, single, limit, found)
    except BaseException:
        top.close()
        found.close()
        raise
    if top not in found.folders:
        top.close()
    return found


def _discover_top(top: Folder, single: str | None, limit: int, found: Found) -> None:
    per_raw: dict[str, tuple[list[Notebook], list[str]]] = {}

    def slot(raw: str) -> tuple[list[Notebook], list[str]]:
        return per_raw.setdefault(raw, ([], []))

    prefix = f"{top.shown}/" if top.shown else ""
    entries = [single] if single else sorted(os.listdir(top.fd))
    held = False
    for name in entries:
        shown = prefix + _escape(name, False)
        stem = name[:-6] if name.endswith(".ipynb") else name
        try:
            mode = os.stat(name, dir_fd=top.fd, follow_symlinks=False).st_mode
        except OSError as err:
            slot(stem)[1].append(f"{shown} cannot be read: {err.strerror}")
            continue
        notebooks, problems = slot(stem) if (stat.S_ISDIR(mode) or name.endswith(".ipynb")
                                             or stat.S_ISLNK(mode)) else ([], found.ignored)
        if stat.S_ISLNK(mode):
            problems.append(f"{shown} is a symbolic link: not followed")
        elif name.startswith(".") and not single:
            if stat.S_ISDIR(mode) or name.endswith(".ipynb"):
                kind = "folder" if stat.S_ISDIR(mode) else "file"
                problems.append(f"{shown} is a hidden {kind} (its name starts with '.'): not graded; rename it")
            else:
                found.ignored.append(f"{shown}: a hidden file, not a submission")
        elif stat.S_ISDIR(mode):
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=top.fd)
            except OSError as err:
                problems.append(f"{shown}/ cannot be opened: {err.strerror}")
                continue
            before = len(notebooks), len(problems)
            sub = Folder(fd, shown)
            _walk(sub, limit, 0, found, notebooks, problems)
            if sub not in found.folders:
                sub.close()
            if (len(notebooks), len(problems)) == before:
                problems.append(f"{shown}/ holds no notebook")
        elif name.endswith(".ipynb"):
            n = len(notebooks)
            _take(top, name, shown, limit, notebooks, problems)
            held = held or len(notebooks) > n
        else:
            found.ignored.append(f"{shown}: not a notebook or a folder, not a submission")
    if held:
        found.folders.append(top)
    shown_names, why = names(list(per_raw))
    for raw, (notebooks, problems) in per_raw.items():
        student = shown_names[raw]
        found.raw[student] = raw
        found.notebooks[student] = notebooks
        found.problems[student] = list(problems)
        if raw in why:
            if why[raw]:
                found.problems[student].insert(0, f"the name {ascii(raw)} is quarantined ({why[raw]}): graded "
                                               f"separately under the escaped name {student}")
            else:
                alike = [shown_names[o] for o in per_raw if o != raw and skeleton(o) == skeleton(raw)]
                found.problems[student].insert(0, "another submission's name looks like this one ("
                                               + ", ".join(alike) + "): graded separately; check the roster")


def discover(root: Path) -> list[tuple[str, Notebook]]:
    """(student, notebook) pairs, as `discover_all` finds them (problems left out; folders closed)."""
    with discover_all(root) as found:
        return [(s, p) for s in sorted(found.notebooks) for p in found.notebooks[s]]
