"""A real JupyterLab in headless Chromium: the first lesson runs and its drawing is SVG in the
page; in lesson 2 the lab widget renders, x=1, w=2, Step shows z=1.5 and 0.8176, and every
input (0, negative, non-numeric, empty, an invalid guess after a run) gets an answer.

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
LAB_LESSON = "02_small_trace.ipynb"



def test_first_lesson_runs_in_jupyterlab_and_its_drawing_is_svg(lab_server, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open_notebook(lab_server, LESSON, "lesson01", tmp_path / "profile") as page:
        ran = run_all_cells(page)
        assert ran == {"ok": True, "status": "idle", "dialogs": 0, "not_run": 0}, ran
        # the trace drawing arrives as SVG; JupyterLab shows SVG outputs as an <img> of the SVG document
        drawing = page.wait_for_selector(f".jp-OutputArea-output {SVG_IMAGE}", timeout=60_000, state="attached")
        svg = urllib.parse.unquote(drawing.get_attribute("src").split(",", 1)[1])
        drawings = page.locator(f".jp-OutputArea-output {SVG_IMAGE}").count()
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        tracebacks = page.locator(".jp-OutputArea-output:has-text('Traceback')").count()
    assert drawings >= 1
    assert tracebacks == 0, f"{tracebacks} cells raised in JupyterLab ({errors} stderr outputs)"
    assert "<svg" in svg and "MulBackward0" in svg


VIEW = ".tracekit-lab .tracekit-lab-view"
SHOWS_JS = "([sel, text]) => { const v = document.querySelector(sel); return !!v && v.innerText.includes(text); }"


def test_the_lab_in_lesson_two_answers_every_input(lab_server, tmp_path):
    """x=1, w=2, Step shows z=1.5 and 0.8176; then 0, a negative, non-numbers and empty boxes each
    get an answer in the page, before and after the tape ran."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open_notebook(lab_server, LAB_LESSON, "lesson02-lab", tmp_path / "profile") as page:
        ran = run_all_cells(page)
        assert ran == {"ok": True, "status": "idle", "dialogs": 0, "not_run": 0}, ran
        lab = page.wait_for_selector(".tracekit-lab", timeout=60_000)
        lab.scroll_into_view_if_needed()
        assert page.locator(".tracekit-lab").count() == 1  # the lab is shown once

        def box(name: str):
            return page.locator(f".tracekit-lab .widget-inline-hbox:has(label:text-is('{name}')) input")

        def enter(name: str, value: str) -> None:
            box(name).fill(value)
            box(name).press("Enter")

        def shows(text: str) -> str:
            page.wait_for_function(SHOWS_JS, arg=[VIEW, text], timeout=60_000, polling=200)
            return page.locator(VIEW).inner_text()

        def press(label: str) -> None:
            page.locator(f".tracekit-lab button:text-is('{label}')").click()

        enter("x", "1")
        enter("w", "2")
        press("Step")
        text = shows("z = 1.5000")
        assert "y = 0.8176" in text and "dy/dx = 0.2983" in text
        page.screenshot(path=str(ARTIFACTS / "lesson02-lab.png"), full_page=False)
        press("Reset")
        shows("set both x and w")
        assert box("x").input_value() == "" and box("w").input_value() == ""
        enter("x", "0")  # the start value, typed: it counts
        shows("x = 0 set; now set w too")
        enter("w", "abc")
        shows("could not read w 'abc' as a number; w is still not set")
        enter("w", "-2")
        shows("w = -2 set")
        press("Step")
        shows("z = -0.5000")  # z = w·x − 0.5 with x = 0
        enter("x", "")
        text = shows("x is empty")
        assert "x is still 0" in text and "z = -0.5000" in text  # refused; the run stays
        page.locator(".tracekit-lab .widget-inline-hbox:has(label:text-is('your z')) input").fill("abc")
        press("Predict")
        shows("could not read your z 'abc' as a number")  # an invalid guess after the tape ran
        page.locator(".tracekit-lab .widget-inline-hbox:has(label:text-is('your z')) input").fill("-0.5")
        press("Predict")
        shows("compared with the tape's values")
        enter("x", "-1")
        text = shows("z = 1.5000")  # (−2)·(−1) − 0.5
        assert "y = 0.8176" in text
        tracebacks = page.locator(".jp-OutputArea-output:has-text('Traceback')").count()
    assert tracebacks == 0
    assert (ARTIFACTS / "lesson02-lab.png").stat().st_size > 10_000


def test_tracekit_lab_command_opens_jupyterlab_on_the_lessons():
    done = subprocess.run([sys.executable, "-m", "tracekit", "lab", "--print-command"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "jupyterlab" in done.stdout and "notebooks" in done.stdout and "01_forward_values.ipynb" in done.stdout
