"""Issue 14 (and 30) in a real browser: lesson 1's trace drawing fits JupyterLab's output area (1280 px
window) instead of being cut off on the right; the screenshot goes to artifacts/browser/."""

import pytest
from jupyterlab_page import ARTIFACTS, open_notebook, run_all_cells

pytestmark = pytest.mark.browser
LESSON = "01_forward_values.ipynb"
MEASURE_JS = """(img) => {
  const area = img.closest('.jp-OutputArea-output');
  const box = img.getBoundingClientRect(), out = area.getBoundingClientRect();
  return {drawn: box.width, natural: img.naturalWidth, area: out.width, right: box.right, areaRight: out.right,
          scrollable: area.scrollWidth > area.clientWidth + 1};
}"""



def test_lesson_one_drawing_fits_the_output_area(lab_server, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "lesson01-drawing.png"
    with open_notebook(lab_server, LESSON, "lesson01-drawing", tmp_path / "profile", width=1280) as page:
        ran = run_all_cells(page)
        assert ran["ok"] is True and ran["dialogs"] == 0, ran
        drawing = page.locator(".jp-OutputArea-output img[src^='data:image/svg+xml']").first
        drawing.wait_for(timeout=60_000, state="attached")
        drawing.scroll_into_view_if_needed()
        size = drawing.evaluate(MEASURE_JS)
        drawing.locator("xpath=ancestor::*[contains(@class,'jp-OutputArea-output')][1]").screenshot(path=str(shot))
    print(f"lesson 1 drawing: {size}")
    # the whole drawing is visible: its own (natural) width, not a CSS squeeze, fits the output area
    assert size["natural"] <= size["area"] and size["drawn"] <= size["area"], size
    assert size["right"] <= size["areaRight"] + 0.5 and not size["scrollable"], size
    assert shot.stat().st_size > 5_000
