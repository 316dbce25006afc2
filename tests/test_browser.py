"""A real JupyterLab in headless Chromium: the first lesson runs, its drawing is SVG in the
page, the lab widget renders, and x=1, w=2, Step shows z=1.5 and 0.8176.

The JupyterLab set-up (isolated from this machine's Jupyter config, kernel started before
the page opens, cells run through the command registry, artifacts on failure) lives in
`jupyterlab_page.py`, so every browser test gets the same care."""

import subprocess
import sys
import urllib.parse

import pytest
from jupyterlab_page import ARTIFACTS, open_notebook, run_all_cells

pytestmark = pytest.mark.browser
SVG_IMAGE = "img[src^='data:image/svg+xml']"
LESSON = "01_forward_values.ipynb"



def test_first_lesson_runs_in_jupyterlab_and_the_lab_widget_works(lab_server, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open_notebook(lab_server, LESSON, "lesson01", tmp_path / "profile") as page:
        ran = run_all_cells(page)
        assert ran == {"ok": True, "status": "idle", "dialogs": 0}, ran
        # the trace drawing arrives as SVG; JupyterLab shows SVG outputs as an <img> of the SVG document
        drawing = page.wait_for_selector(f".jp-OutputArea-output {SVG_IMAGE}", timeout=60_000, state="attached")
        svg = urllib.parse.unquote(drawing.get_attribute("src").split(",", 1)[1])
        lab = page.wait_for_selector(".tracekit-lab", timeout=60_000)
        lab.scroll_into_view_if_needed()
        for name, value in (("x", "1"), ("w", "2")):
            box = page.locator(f".tracekit-lab .widget-inline-hbox:has(label:text-is('{name}')) input")
            box.fill(value)
            box.press("Enter")
        page.locator(".tracekit-lab button:text-is('Step')").click()
        view = page.locator(".tracekit-lab .tracekit-lab-view")
        view.locator("text=z = 1.5000").wait_for(timeout=60_000)
        text = view.inner_text()
        page.screenshot(path=str(ARTIFACTS / "lesson01-lab.png"), full_page=False)
        drawings = page.locator(f".jp-OutputArea-output {SVG_IMAGE}").count()
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        tracebacks = page.locator(".jp-OutputArea-output:has-text('Traceback')").count()
    assert "z = 1.5000" in text and "y = 0.8176" in text and "dy/dx = 0.2983" in text
    assert drawings >= 1
    assert tracebacks == 0, f"{tracebacks} cells raised in JupyterLab ({errors} stderr outputs)"
    assert "<svg" in svg and "MulBackward0" in svg
    assert (ARTIFACTS / "lesson01-lab.png").stat().st_size > 10_000


def test_tracekit_lab_command_opens_jupyterlab_on_the_lessons():
    done = subprocess.run([sys.executable, "-m", "tracekit", "lab", "--print-command"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "jupyterlab" in done.stdout and "notebooks" in done.stdout and "01_forward_values.ipynb" in done.stdout
