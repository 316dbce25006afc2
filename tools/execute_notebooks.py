"""Re-execute every lesson notebook (or the ones named) and rewrite its stored outputs.

    python tools/execute_notebooks.py                 # notebooks/*.ipynb
    python tools/execute_notebooks.py notebooks/02_small_trace.ipynb exercises/solutions/*.ipynb

Runs each notebook top to bottom in a fresh kernel of this Python environment, from the
notebook's own folder, and fails loudly if a cell raises (unless the cell is marked with
NBVAL_RAISES_EXCEPTION). Run it after changing tracekit or a lesson, then commit.
"""

from __future__ import annotations

import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracekit.course import KERNELSPEC  # noqa: E402


def execute(path: pathlib.Path, timeout: int = 300) -> float:
    """Execute one notebook in place; return the seconds it took."""
    book = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    client = NotebookClient(
        book, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
        allow_error_names=[], record_timing=False,
    )
    for cell in book.cells:  # cells that raise on purpose carry nbval's marker
        if cell.cell_type == "code" and "NBVAL_RAISES_EXCEPTION" in cell.source:
            cell.metadata.setdefault("tags", [])
            if "raises-exception" not in cell.metadata["tags"]:
                cell.metadata["tags"].append("raises-exception")
    client.execute()
    for cell in book.cells:
        cell.metadata.pop("execution", None)
    book.metadata["kernelspec"] = dict(KERNELSPEC)  # as JupyterLab writes it: opening the lesson changes nothing
    nbformat.write(book, path)
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    paths = [pathlib.Path(p) for p in argv] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for path in paths:
        seconds = execute(path)
        print(f"{path}: {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
