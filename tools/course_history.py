"""Write tracekit/course_history.py: for every version of a course notebook that a tracekit with the
old course manifest could have copied (each commit from the one that added `tracekit course` up to the
one before the manifest recorded cells), its bytes' hash -> its cells' hash (tracekit.course.cells_digest).

    python tools/course_history.py            # rewrites tracekit/course_history.py from git history

A course folder copied by such a tracekit recorded only whole-file hashes; with this table `tracekit
course` still tells a notebook the student only ran or reopened from one whose cells she changed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracekit.course import FOLDERS, cells_digest  # noqa: E402

FIRST = "22dd65a"  # the commit that added `tracekit course` and its manifest of whole-file hashes
LAST = "ee18285"  # the last commit whose `tracekit course` recorded whole-file hashes only


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout


def shipped_versions(first: str = FIRST, last: str = LAST) -> dict[str, str]:
    """Every course file's version between `first` and `last` (git): its sha256 -> its cells' digest."""
    commits = _git("rev-list", f"{first}^..{last}").decode().split()
    found: dict[str, str] = {}
    for commit in commits:
        for line in _git("ls-tree", "-r", commit, "--", *FOLDERS).decode().splitlines():
            meta, path = line.split("\t", 1)
            folder, _, name = path.partition("/")
            if folder in FOLDERS and "/" not in name and fnmatch.fnmatch(name, FOLDERS[folder]):
                data = _git("cat-file", "blob", meta.split()[2])
                cells = cells_digest(data)
                if cells is not None:
                    found[hashlib.sha256(data).hexdigest()] = cells
    return dict(sorted(found.items()))


def main() -> int:
    table = shipped_versions()
    lines = ["# ruff: noqa: E501",
             '"""The course notebooks an older `tracekit course` copied, which recorded whole-file hashes',
             "only: each version's sha256 -> the hash of its cells (tracekit.course.cells_digest). Written",
             f'by tools/course_history.py from git history ({FIRST}..{LAST}): do not edit."""', "",
             "CELLS_OF_SHIPPED: dict[str, str] = {"]
    lines += [f'    "{k}": "{v}",' for k, v in table.items()]
    lines.append("}")
    (ROOT / "tracekit" / "course_history.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(table)} shipped versions -> tracekit/course_history.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
