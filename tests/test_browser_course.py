"""The student's path from the wheel, in a real headless Chromium: in a new venv with only the wheel
and a new HOME, `tracekit course ~/c && tracekit lab ~/c` opens JupyterLab on the first lesson; the
lesson's "Check yourself" link opens its exercise, and the exercise's `tk.check` cell runs and shows
its report once."""

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from jupyterlab_page import ARTIFACTS, CHROMIUM, FLAGS, PAGE_TIMEOUT_MS, RUN_TIMEOUT_MS, rest, save_failure
from servers import free_port, processes_under, wait_http
from wheel_env import clean_env

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LESSON, EXERCISE = "notebooks/01_forward_values.ipynb", "exercises/ex01_forward_values.ipynb"

OPEN_JS = """(path) => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
                 && panel.sessionContext.session.kernel;
  return !!(panel && panel.context && panel.context.path === path && kernel
            && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
            && panel.content && panel.content.widgets.length > 0);
}"""
RUN_LAST_JS = """async () => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await app.commands.execute('notebook:run-all-cells');
  return panel.content.widgets.length;
}"""


def test_course_then_lab_from_the_wheel_link_opens_the_exercise_and_check_runs(wheel_venv, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    home = tmp_path / "home"
    script = str(wheel_venv["python"].parent / "tracekit")
    env = clean_env(home)
    subprocess.run([script, "course", str(home / "c")], check=True, cwd=home, env=env, capture_output=True)
    port, token = free_port(), secrets.token_hex(16)
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        lab = subprocess.Popen(
            [script, "lab", str(home / "c"), "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", "--allow-root", "--LabApp.expose_app_in_browser=True",
             "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = {"url": f"http://127.0.0.1:{port}", "token": token, "log": log}
    try:
        wait_http(f"{server['url']}/api/status?token={token}", process=lab, timeout=240)
        # both notebooks' kernels (the wheel venv's default python3 kernel) started before the page opens,
        # so JupyterLab has nothing to ask (see jupyterlab_page.py)
        for path in (LESSON, EXERCISE):
            session = rest(server, "POST", "/api/sessions", {"path": path, "type": "notebook", "name": path,
                                                              "kernel": {"name": "python3"}})
        kernel_command = Path(f"/proc/{_kernel_pid(session['kernel']['id'])}/cmdline").read_bytes().split(b"\0")
        assert kernel_command[0].decode() == str(wheel_venv["python"]), kernel_command  # the wheel venv's python
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                           headless=True, args=FLAGS,
                                                           viewport={"width": 1400, "height": 1000})
            page = context.pages[0] if context.pages else context.new_page()
            try:
                page.goto(f"{server['url']}/?token={token}", timeout=PAGE_TIMEOUT_MS)  # tracekit lab's default URL
                page.wait_for_function(OPEN_JS, arg=LESSON, timeout=PAGE_TIMEOUT_MS, polling=250)
                link = page.locator(".jp-MarkdownOutput a", has_text="exercises/ex01_forward_values.ipynb").first
                link.scroll_into_view_if_needed(timeout=60_000)
                link.click()
                page.wait_for_function(OPEN_JS, arg=EXERCISE, timeout=PAGE_TIMEOUT_MS, polling=250)
                page.set_default_timeout(RUN_TIMEOUT_MS)
                cells = page.evaluate(RUN_LAST_JS)
                page.wait_for_function(OPEN_JS, arg=EXERCISE, timeout=RUN_TIMEOUT_MS, polling=250)
                last = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").nth(cells - 1)
                last.locator(".jp-OutputArea-output").first.wait_for(timeout=RUN_TIMEOUT_MS)
                outputs = last.locator(".jp-OutputArea-output")
                count, text = outputs.count(), outputs.first.inner_text()
                source = last.locator(".jp-InputArea").inner_text()
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "course-exercise-check.png"), full_page=False)
                tracebacks = page.locator(".jp-OutputArea-output:has-text('Traceback')").count()
            except BaseException:
                save_failure(page, "course-from-wheel", log)
                raise
            finally:
                context.close()
        assert 'tk.check("ex01")' in source
        assert count == 1, f"{count} outputs: {text}"  # one report, not a summary and a raw list
        assert text.startswith("ex01 · ") and "/ 5 points" in text and "[{" not in text, text
        assert "✗ q3" in text  # the stubs raise NotImplementedError: q3 is judged, not crashed
        assert tracebacks == 0
    finally:
        lab.send_signal(signal.SIGTERM)
        lab.wait(90)
    assert lab.returncode == 128 + signal.SIGTERM
    assert processes_under(str(home)) == [], "tracekit lab left processes running"


def _kernel_pid(kernel_id: str) -> int:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"ipykernel" in command and kernel_id.encode() in command:
                return int(pid)
    raise AssertionError(f"no kernel process for {kernel_id} ({sys.platform})")
