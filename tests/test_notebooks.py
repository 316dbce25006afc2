"""The committed lesson notebooks: structure, and that nbval really compares their outputs."""

import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


def test_lessons_with_outputs_ending_in_check_yourself():
    numbers = [p.name[:2] for p in LESSONS]
    assert len(numbers) >= 11 and numbers == [f"{i:02d}" for i in range(1, len(numbers) + 1)]
    for path in LESSONS:
        book = nbformat.read(path, as_version=4)
        code = [c for c in book.cells if c.cell_type == "code"]
        defines = re.compile(r"^(def|class) ", re.M)  # a cell that defines the program may print nothing
        assert code and all(c.outputs or not c.source.strip() for c in code
                            if "import" not in c.source and not defines.search(c.source)), path
        assert "Check yourself" in book.cells[-1].source and 'tk.check("ex' in book.cells[-1].source, path
        assert all(len(c.source.splitlines()) <= 15 for c in code), f"{path}: lesson cells stay short"


@pytest.mark.notebooks
def test_nbval_fails_when_a_stored_output_is_wrong(tmp_path):
    lesson = ROOT / "notebooks" / "02_small_trace.ipynb"
    copy = tmp_path / lesson.name
    shutil.copy(lesson, copy)
    text = copy.read_text().replace("paper dy/dx = 0.2983", "paper dy/dx = 0.9999")
    assert "0.9999" in text
    copy.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
         "-o", "addopts=", "--rootdir", str(tmp_path), str(copy)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "0.9999" in done.stdout and "1 failed" in done.stdout
