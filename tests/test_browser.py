"""A real JupyterLab in headless Chromium: the first lesson runs, its drawing is SVG in the
page, the lab widget renders, and x=1, w=2, Step shows z=1.5 and 0.8176."""

import os
import secrets
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from servers import free_port, stop, wait_http

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("TRACEKIT_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
SVG_IMAGE = "img[src^='data:image/svg+xml']"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.importorskip("playwright")
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")  # the browser saves what it runs: work on a copy
    port, token = free_port(), secrets.token_hex(16)
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # render every cell (no windowing), so outputs above the fold stay in the page
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / "config"), "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(root / "settings")}
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root / 'notebooks'}", "--allow-root",
         "--ServerApp.open_browser=False", "--LabApp.news_url=None", "--LabApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/api/status?token={token}", process=process)
        yield {"url": f"http://127.0.0.1:{port}", "token": token, "root": root}
    finally:
        stop(process)


def test_first_lesson_runs_in_jupyterlab_and_the_lab_widget_works(lab_server, tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    url = f"{lab_server['url']}/lab/tree/01_forward_values.ipynb?token={lab_server['token']}"
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url, timeout=120_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            page.click(".lm-MenuBar-itemLabel:text-is('Run')")
            page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
            # the trace drawing arrives as SVG; JupyterLab shows SVG outputs as an <img> of the SVG document
            drawing = page.wait_for_selector(f".jp-OutputArea-output {SVG_IMAGE}", timeout=120_000, state="attached")
            svg = urllib.parse.unquote(drawing.get_attribute("src").split(",", 1)[1])
            lab = page.wait_for_selector(".tracekit-lab", timeout=90_000)
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
        finally:
            context.close()
    assert "z = 1.5000" in text and "y = 0.8176" in text and "dy/dx = 0.2983" in text
    assert drawings >= 1
    assert "<svg" in svg and "MulBackward0" in svg and "forward (execution order)" in svg
    assert (ARTIFACTS / "lesson01-lab.png").stat().st_size > 10_000


def test_tracekit_lab_command_opens_jupyterlab_on_the_lessons():
    done = subprocess.run([sys.executable, "-m", "tracekit", "lab", "--print-command"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "jupyterlab" in done.stdout and "notebooks" in done.stdout and "01_forward_values.ipynb" in done.stdout
