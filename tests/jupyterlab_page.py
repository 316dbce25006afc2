"""A real JupyterLab for browser tests, made independent of the machine it runs on.

Why this exists: on a fresh machine JupyterLab activates its plugins slowly, and the
notebook's execution indicator reads "idle" before any kernel exists. A test that clicked
"Run All Cells" at that moment met JupyterLab's "Select Kernel" dialog, and nothing ran.
So here:

- the server gets its own config, data, runtime, settings and IPython folders and a HOME
  of its own, and a kernelspec written by the test that starts *this* interpreter (no
  kernelspec, Jupyter config or `~/.cache` of the developer's machine is used);
- the notebook's session and kernel are created through the server's REST API before the
  page opens, so JupyterLab attaches to a running kernel and has nothing to ask;
- the page is driven through JupyterLab's command registry (`window.jupyterapp`, exposed
  with `--LabApp.expose_app_in_browser`), not by clicking menu labels, and waits on real
  signals: the kernel connected and idle, the command's promise resolved;
- any failure saves a screenshot, the page's text and the server log to
  `artifacts/browser/` and prints their paths.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import free_port, stop, wait_http

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("TRACEKIT_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
KERNEL = "tracekit-test-python"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]
# timeouts for a loaded 2-core machine: JupyterLab's first start there takes ~15 s of plugin activation
PAGE_TIMEOUT_MS = 180_000
RUN_TIMEOUT_MS = 300_000

KERNEL_READY_JS = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
                 && panel.sessionContext.session.kernel;
  return !!(kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
            && panel.content && panel.content.widgets.length > 0);
}"""
# ipywidgets' manager registers its comm target on the kernel connection once it is set up: a widget
# created before that is never seen by the page (its output falls back to text/plain)
WIDGETS_READY_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  if (!kernel) return false;
  return kernel._targetRegistry === undefined || 'jupyter.widget' in kernel._targetRegistry;
}"""
RUN_ALL_JS = """async () => {
  const app = window.jupyterapp;
  await app.shell.currentWidget.sessionContext.ready;  // on a loaded machine the kernel may not be up yet
  const ok = await app.commands.execute('notebook:run-all-cells');
  return {ok, dialogs: document.querySelectorAll('.jp-Dialog').length};
}"""
# after the run and the wait for an idle kernel: its status, and how many code cells did not run
AFTER_RUN_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return {status: panel.sessionContext.session.kernel.status,
          not_run: cells.filter(c => !c.model.executionCount).length};
}"""


def isolated_env(root: Path) -> dict:
    """Environment for a Jupyter server that reads nothing of this machine's Jupyter setup."""
    for name in ("config", "data", "runtime", "settings", "ipython", "home"):
        (root / name).mkdir(parents=True, exist_ok=True)
    spec = root / "data" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (tracekit test)", "language": "python",
    }))
    return {
        **os.environ, "HOME": str(root / "home"), "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_DATA_DIR": str(root / "data"), "JUPYTER_PATH": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(root / "settings"),
        "IPYTHONDIR": str(root / "ipython"), "XDG_CACHE_HOME": str(root / "home" / ".cache"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }


def rest(server: dict, method: str, path: str, body: dict | None = None) -> dict:
    """Call the Jupyter server's REST API with the test's token."""
    request = urllib.request.Request(
        f"{server['url']}{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"token {server['token']}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        raw = response.read()
    return json.loads(raw) if raw else {}


@contextlib.contextmanager
def jupyterlab(root: Path, notebooks: Path) -> Iterator[dict]:
    """Start JupyterLab on a copy of `notebooks` under `root`; yield url, token, folders, log."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    pytest.importorskip("playwright", reason="playwright is in the [test] extra")
    shutil.copytree(notebooks, root / "notebooks")  # the browser saves what it runs: work on a copy
    env = isolated_env(root)
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # render every cell (no windowing), so outputs above the fold stay in the page
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port, token = free_port(), secrets.token_hex(16)
    log = root / "jupyterlab.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root / 'notebooks'}", "--allow-root",
             "--ServerApp.open_browser=False", "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             f"--MappingKernelManager.default_kernel_name={KERNEL}"],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/api/status?token={token}", process=process, timeout=180)
        yield {"url": f"http://127.0.0.1:{port}", "token": token, "root": root, "log": log}
    finally:
        stop(process)


def start_session(server: dict, notebook: str) -> dict:
    """Create the notebook's session (and start its kernel) before the page opens."""
    specs = rest(server, "GET", "/api/kernelspecs")
    assert KERNEL in specs["kernelspecs"], f"the test kernelspec is missing: {sorted(specs['kernelspecs'])}"
    return rest(server, "POST", "/api/sessions",
                {"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": KERNEL}})


def save_failure(page, name: str, log: Path | None = None) -> list[Path]:
    """Screenshot, page text and server log of a failed browser test; print where they are."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    saved = []
    with contextlib.suppress(Exception):
        page.screenshot(path=str(ARTIFACTS / f"{name}-failure.png"), full_page=False)
        saved.append(ARTIFACTS / f"{name}-failure.png")
    with contextlib.suppress(Exception):
        (ARTIFACTS / f"{name}-failure.txt").write_text(page.inner_text("body"))
        saved.append(ARTIFACTS / f"{name}-failure.txt")
    if log is not None and log.exists():
        shutil.copy(log, ARTIFACTS / f"{name}-jupyterlab.log")
        saved.append(ARTIFACTS / f"{name}-jupyterlab.log")
    print(f"\nbrowser test {name} failed; saved: " + ", ".join(str(p) for p in saved), file=sys.stderr)
    return saved


@contextlib.contextmanager
def open_notebook(server: dict, notebook: str, name: str, profile: Path, width: int = 1400,
                  height: int = 1000) -> Iterator:
    """A Chromium page (`width` × `height` px) with `notebook` open on a running, idle kernel; artifacts on failure."""
    from playwright.sync_api import sync_playwright

    start_session(server, notebook)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": width, "height": height},
        )
        page = context.pages[0] if context.pages else context.new_page()
        try:
            # a workspace of its own, reset: only this notebook open (not the tabs an earlier test left)
            page.goto(f"{server['url']}/lab/workspaces/{name}/tree/{notebook}?reset&token={server['token']}",
                      timeout=PAGE_TIMEOUT_MS)
            page.wait_for_function(KERNEL_READY_JS, timeout=PAGE_TIMEOUT_MS, polling=250)
            yield page
        except BaseException:
            save_failure(page, name, server.get("log"))
            raise
        finally:
            context.close()


def run_all_cells(page) -> dict:
    """Run every cell through JupyterLab's command registry; wait until it finished and the kernel is idle."""
    page.set_default_timeout(RUN_TIMEOUT_MS)
    page.wait_for_function(WIDGETS_READY_JS, timeout=RUN_TIMEOUT_MS, polling=250)
    result = page.evaluate(RUN_ALL_JS)
    page.wait_for_function(KERNEL_READY_JS, timeout=RUN_TIMEOUT_MS, polling=250)
    after = page.evaluate(AFTER_RUN_JS)  # read once the kernel is idle (right after the run it may still report)
    return {"ok": result["ok"], "status": after["status"], "dialogs": result["dialogs"], "not_run": after["not_run"]}
