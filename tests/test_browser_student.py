"""What a student meets in a real JupyterLab in headless Chromium, beyond running a lesson:

- a lesson she opened, ran and JupyterLab autosaved (it rewrites the notebook's kernelspec and
  outputs) is still updated by `tracekit course`; one whose code cell she edited in the page is kept;
- tables and the `tk.check` report wrap between words, never inside one, in a narrow notebook;
- a reopened lesson shows the lab widget's text form, and that text says how to get the lab back.

The JupyterLab set-up is `jupyterlab_page.py`'s (its own config, kernel started before the page opens)."""

import json
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from jupyterlab_page import RUN_TIMEOUT_MS, jupyterlab, open_notebook, run_all_cells

from tracekit.course import MANIFEST, Copied, copy_course
from tracekit.lab import STUB_NOTE

pytestmark = [pytest.mark.browser, pytest.mark.slow]
RAN_ONLY, EDITED = "notebooks/01_forward_values.ipynb", "notebooks/04_retention.ipynb"
AUTOSAVE_S = 5  # JupyterLab's autosave interval in these tests (its default is 120 s)
CLEAN_JS = "() => !window.jupyterapp.shell.currentWidget.context.model.dirty"
EDIT_JS = """(text) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cell = panel.content.widgets.find(c => c.model.type === 'code');
  panel.content.activeCellIndex = panel.content.widgets.indexOf(cell);
  return cell.editor !== null;
}"""


def _older(folder: Path, rel: str) -> None:
    """`rel` as an older course had it (one more markdown cell), recorded in the manifest as copied."""
    path = folder / rel
    book = nbformat.read(path, as_version=4)
    book.cells.insert(1, nbformat.v4.new_markdown_cell("A paragraph the newer course dropped."))
    nbformat.write(book, path)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest[rel] = Copied.of(path.read_bytes()).entry()
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _autosaved(page, path: Path, before: bytes, timeout: float = 120) -> bytes:
    """Wait until JupyterLab's autosave wrote the notebook (no save command: what a student gets)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = path.read_bytes()
        if data != before and page.evaluate(CLEAN_JS):
            return data
        time.sleep(1)
    raise AssertionError(f"JupyterLab did not autosave {path.name} within {timeout:.0f} s")


@pytest.fixture
def course_lab(tmp_path):
    """JupyterLab (autosave every few seconds) on a course folder an older course was copied into."""
    course = copy_course(tmp_path / "course").folder
    for rel in (RAN_ONLY, EDITED):
        _older(course, rel)
    with jupyterlab(tmp_path / "lab", course / "notebooks") as server:
        settings = server["root"] / "settings" / "@jupyterlab" / "docmanager-extension"
        settings.mkdir(parents=True, exist_ok=True)  # read when the page loads
        (settings / "plugin.jupyterlab-settings").write_text(json.dumps({"autosaveInterval": AUTOSAVE_S}))
        folder = server["root"]  # served: folder/notebooks; the course's manifest and exercises beside it
        shutil.copy(course / MANIFEST, folder / MANIFEST)
        shutil.copytree(course / "exercises", folder / "exercises")
        yield server, folder


def test_a_lesson_run_and_autosaved_in_jupyterlab_updates_an_edited_one_is_kept(course_lab, tmp_path):
    server, folder = course_lab
    ran_only, edited = folder / RAN_ONLY, folder / EDITED
    before = ran_only.read_bytes()
    with open_notebook(server, Path(RAN_ONLY).name, "student-ran", tmp_path / "p1") as page:
        assert run_all_cells(page)["not_run"] == 0
        saved = _autosaved(page, ran_only, before)
    book = json.loads(saved)
    assert book["metadata"]["kernelspec"]["name"] == "tracekit-test-python"  # JupyterLab rewrote the metadata
    assert any(c.get("execution_count") for c in book["cells"])  # and the outputs: it ran
    before = edited.read_bytes()
    with open_notebook(server, Path(EDITED).name, "student-edited", tmp_path / "p2") as page:
        assert page.evaluate(EDIT_JS)
        page.keyboard.press("Enter")  # edit mode in the first code cell, as a click would
        page.keyboard.press("Control+End")
        page.keyboard.type("\nmine = 42  # the student's line")
        page.keyboard.press("Escape")
        mine = _autosaved(page, edited, before)
    assert "mine = 42" in mine.decode()
    done = copy_course(folder)
    assert done.updated == [RAN_ONLY] and done.kept == [EDITED], done.summary()
    assert ran_only.read_bytes() == (Path(__file__).resolve().parent.parent / RAN_ONLY).read_bytes()
    assert edited.read_bytes() == mine


WORDS_SPLIT_JS = """(selector) => {
  // every word of every text node under `selector`: the ones whose letters lie on more than one line
  const split = [];
  for (const root of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /\\S+/g;
      let m;
      while ((m = re.exec(node.data)) !== null) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) split.push(m[0]);
      }
    }
  }
  return split;
}"""
NARROW = """import torch
import tracekit as tk

a = torch.randn(64, requires_grad=True)
tk.trace((a.exp() * a.sigmoid()).sum()).table()"""


def test_tables_and_the_check_report_wrap_between_words_in_a_narrow_notebook(lab_server, tmp_path):
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NARROW),
                                           nbformat.v4.new_code_cell('tk.check("ex07", {})')])
    nbformat.write(book, lab_server["root"] / "notebooks" / "narrow.ipynb")
    with open_notebook(lab_server, "narrow.ipynb", "narrow", tmp_path / "profile", width=620) as page:
        assert run_all_cells(page)["not_run"] == 0
        page.wait_for_selector(".tracekit-check", timeout=RUN_TIMEOUT_MS)
        wrapped = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output td, .tracekit-check pre')]
                                         .filter(e => e.getClientRects().length && e.getClientRects()[0].height > 30)
                                         .length""")
        tables = page.evaluate(WORDS_SPLIT_JS, ".jp-OutputArea-output table")
        report = page.evaluate(WORDS_SPLIT_JS, ".tracekit-check")
        text = page.locator(".tracekit-check").inner_text()
    assert wrapped > 0  # the page is narrow enough that cells and the report do wrap ...
    assert tables == [] and report == []  # ... and no word lies on two lines
    assert "ex07 · " in text and "define `hooks`" in text


def test_a_reopened_lesson_shows_the_lab_as_text_that_says_how_to_get_it(lab_server, tmp_path):
    """Lesson 2 as shipped (its outputs saved, no kernel state): the lab cell shows the saved text form."""
    with open_notebook(lab_server, "02_small_trace.ipynb", "reopened", tmp_path / "profile") as page:
        cell = page.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text="tk.lab()")).last
        cell.scroll_into_view_if_needed()
        shown = cell.locator(".jp-OutputArea").inner_text()
    assert STUB_NOTE.split(":")[0] in shown and "Run this cell" in shown, shown
