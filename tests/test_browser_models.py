"""Issue 30 in a real browser at a 1280 px window: the four real models' drawings, sorted tables,
per-module tables and timelines in JupyterLab. A drawing that fits is an image at full size in
the cell; one wider than the cell is at full size in a box that scrolls sideways (never clipped,
never squeezed); tables wrap inside the cell. Screenshots go to artifacts/browser/."""

import json

import nbformat
import pytest
from jupyterlab_page import ARTIFACTS, ROOT, jupyterlab, open_notebook, run_all_cells

pytestmark = pytest.mark.browser
MODELS = ("mlp", "encoder", "cnn", "lstm")
MEASURE_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output')].map((area, k) => {
  const out = area.getBoundingClientRect();
  const img = area.querySelector('img'), table = area.querySelector('table');
  const scroller = area.querySelector('div[style*="overflow-x"]');
  const r = {k, area: out.width, scrollable: area.scrollWidth > area.clientWidth + 1};
  if (img) { const b = img.getBoundingClientRect();
             Object.assign(r, {img: true, natural: img.naturalWidth, drawn: b.width, right: b.right,
                               areaRight: out.right, svg: img.src.startsWith('data:image/svg') }); }
  if (scroller) Object.assign(r, {box: scroller.getBoundingClientRect().width,
                                  boxScrolls: scroller.scrollWidth > scroller.clientWidth + 1});
  if (table) { const t = table.getBoundingClientRect();
               Object.assign(r, {table: t.width, tableRight: t.right, areaRight: out.right}); }
  return r;
})"""


def _notebook(folder):
    cells = [nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\nimport real_models")]
    for name in MODELS:
        cells += [nbformat.v4.new_code_cell(f"tr = real_models.{name}()\ntr.backward()\ntr"),
                  nbformat.v4.new_code_cell("tr.table(sort='bytes', top=10)"),
                  nbformat.v4.new_code_cell("tr.by_module()"),
                  nbformat.v4.new_code_cell("tr.timeline()")]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "tracekit-test-python", "display_name": "Python", "language": "python"}
    folder.mkdir()
    nbformat.write(nb, folder / "models.ipynb")
    return folder


def test_real_models_read_at_full_size_in_a_1280px_window(tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with jupyterlab(tmp_path / "lab", _notebook(tmp_path / "nb")) as server, \
            open_notebook(server, "models.ipynb", "models-1280", tmp_path / "profile", width=1280,
                          height=3600) as page:  # tall: each output's screenshot whole
        ran = run_all_cells(page)
        assert ran["ok"] is True and ran["dialogs"] == 0, ran
        page.wait_for_timeout(2000)
        sizes = page.evaluate(MEASURE_JS)
        areas = page.locator(".jp-OutputArea-output")
        for k in range(areas.count()):
            areas.nth(k).scroll_into_view_if_needed()
            areas.nth(k).screenshot(path=str(ARTIFACTS / f"models-1280-output{k:02d}.png"))
    (ARTIFACTS / "models-1280.json").write_text(json.dumps(sizes, indent=1))
    print(json.dumps(sizes))
    drawings = [s for s in sizes if s.get("svg")]
    assert len(drawings) == len(MODELS)
    for s in drawings:
        assert s["area"] <= 848 + 1, s  # a JupyterLab cell at a 1280 px window
        if "box" in s:  # wider than the cell: full size, in a box that scrolls
            assert s["box"] <= s["area"] + 0.5 and s["boxScrolls"] and s["drawn"] >= s["natural"] - 0.5, s
        else:  # fits: full size, nothing cut
            assert s["drawn"] >= s["natural"] - 0.5 and s["natural"] <= s["area"], s
            assert s["right"] <= s["areaRight"] + 0.5, s
    tables = [s for s in sizes if "table" in s]
    assert len(tables) == 2 * len(MODELS)
    assert all(s["table"] <= s["area"] + 0.5 and s["tableRight"] <= s["areaRight"] + 0.5 for s in tables), tables
    figures = [s for s in sizes if s.get("img") and not s.get("svg")]
    assert len(figures) == len(MODELS) and all(s["drawn"] <= s["area"] + 0.5 for s in figures), figures
