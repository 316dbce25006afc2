"""A real local JupyterHub (dummy authenticator, simple spawner, configurable-http-proxy from
npm) whose single-user servers and kernels run tracekit from the built wheel (a new venv,
tests/wheel_env.py): an instructor hands out the course with nbgitpuller (a git repository made
with `tracekit course`), a student pulls it and runs a lesson and an exercise's check; two users
run a lesson in their own servers through its API."""

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest
from jupyterlab_page import KERNEL, isolated_env
from servers import free_port, processes_under, stop, wait_http
from wheel_env import clean_env

pytestmark = pytest.mark.hub
ROOT = Path(__file__).resolve().parent.parent
USERS = ("student1", "student2")
PULLER = "student3"  # gets the course through nbgitpuller


def find_proxy() -> str | None:
    """configurable-http-proxy: TRACEKIT_CHP, ./node_modules/.bin, or PATH."""
    for candidate in (os.environ.get("TRACEKIT_CHP"), ROOT / "node_modules" / ".bin" / "configurable-http-proxy"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return shutil.which("configurable-http-proxy")


def api(base: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        raw = response.read()
    return json.loads(raw) if raw else {}


async def run_cells(ws_url: str, token: str, cells: list[str], timeout: float = 120) -> list[str]:
    """Run code cells on a kernel through the Jupyter server's websocket; return their text outputs."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    conn = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}))
    session = uuid.uuid4().hex
    outputs = []
    try:
        for code in cells:
            msg_id = uuid.uuid4().hex
            conn.write_message(json.dumps({
                "header": {"msg_id": msg_id, "username": "test", "session": session, "msg_type": "execute_request",
                           "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell",
                "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True},
            }))
            text = []
            while True:
                raw = await asyncio.wait_for(conn.read_message(), timeout)
                if raw is None:
                    raise RuntimeError("the kernel's websocket closed")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    text.append(content["text"])
                elif kind in ("execute_result", "display_data"):
                    text.append(content["data"].get("text/plain", ""))
                elif kind == "error":
                    raise RuntimeError(f"cell failed: {content['ename']}: {content['evalue']}")
                elif kind == "status" and content["execution_state"] == "idle":
                    break
            outputs.append("".join(text))
    finally:
        conn.close()
    return outputs


@pytest.fixture(scope="module")
def hub(tmp_path_factory, request):
    proxy = find_proxy()
    if proxy is None:
        pytest.skip("configurable-http-proxy not installed (npm install configurable-http-proxy)")
    pytest.importorskip("jupyterhub")
    # the single-user servers and their kernels run in the wheel's venv
    python = str(request.getfixturevalue("wheel_venv")["python"])
    root = tmp_path_factory.mktemp("hub")
    marker = f"tracekit-hub-{secrets.token_hex(4)}"
    (root / marker).mkdir()  # every process the hub starts runs with this folder in its command line
    port, token = free_port(), secrets.token_hex(24)
    # the hub and each user's server read no Jupyter config, kernelspec or cache of this machine:
    # their own folders, and a kernelspec that starts this interpreter
    env = isolated_env(root / "jupyter")
    env.pop("PYTHONPATH", None)  # the spawner passes PYTHONPATH on: no checkout may stand in for the wheel
    spec = root / "jupyter" / "data" / "kernels" / KERNEL / "kernel.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()),
                                "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]}))
    jupyter_env = {k: env[k] for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_PATH", "IPYTHONDIR",
                                       "JUPYTER_PLATFORM_DIRS")}
    config = root / "jupyterhub_config.py"
    config.write_text(textwrap.dedent(f"""
        c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
        c.JupyterHub.hub_ip = "127.0.0.1"
        c.JupyterHub.hub_port = {free_port()}
        c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
        c.ConfigurableHTTPProxy.command = [{proxy!r}]
        c.JupyterHub.authenticator_class = "dummy"
        c.JupyterHub.spawner_class = "simple"
        c.JupyterHub.db_url = "sqlite:///{root / 'hub.sqlite'}"
        c.JupyterHub.cookie_secret_file = {str(root / 'cookie_secret')!r}
        c.JupyterHub.pid_file = {str(root / 'hub.pid')!r}
        c.JupyterHub.cleanup_servers = True
        c.JupyterHub.services = [{{"name": "tester", "api_token": {token!r}}}]
        c.JupyterHub.load_roles = [{{"name": "tester", "services": ["tester"],
            "scopes": ["admin:users", "admin:servers", "access:servers", "list:users", "read:users"]}}]
        c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
        c.Spawner.args = ["--allow-root"]
        c.Spawner.environment = {jupyter_env!r}
        c.Spawner.start_timeout = 120
        c.Spawner.http_timeout = 120
        c.SimpleLocalProcessSpawner.home_dir_template = {str(root / marker / '{username}')!r}
    """))
    for user in (*USERS, PULLER):
        (root / marker / user).mkdir()
    env = {**env, "PATH": f"{Path(python).parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=root, env=env,
                               stdout=subprocess.DEVNULL, stderr=(root / "hub.log").open("wb"),
                               start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/hub/api/", headers={"Authorization": f"token {token}"}, process=process, timeout=120)
        yield {"base": base, "token": token, "root": root, "marker": marker, "process": process}
    finally:
        stop(process)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=instructor", "-c", "user.email=i@example.invalid", *args],
                   cwd=cwd, check=True, capture_output=True)


def git_pull(base: str, token: str, user: str, query: dict) -> list[dict]:
    """nbgitpuller's API (what its link's page calls): the progress events until it finished."""
    url = f"{base}/user/{user}/git-pull/api?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=300) as response:
        text = response.read().decode()
    return [json.loads(line[len("data:"):]) for line in text.splitlines() if line.startswith("data:")]


def test_an_instructor_hands_out_the_course_with_nbgitpuller(hub, wheel_venv, tmp_path):
    """The README's hub path: `tracekit course` into a git repository, a student opens the nbgitpuller
    link (here: its API), gets lessons and exercises side by side, and runs a lesson and a check."""
    if subprocess.run([str(wheel_venv["python"]), "-c", "import nbgitpuller"], capture_output=True).returncode:
        pytest.skip("nbgitpuller is not installed (it is in the [test] extra)")
    base, token = hub["base"], hub["token"]
    repo = tmp_path / "course-repo"
    done = subprocess.run([str(wheel_venv["python"].parent / "tracekit"), "course", str(repo)],
                          capture_output=True, text=True, cwd=tmp_path, env=clean_env(tmp_path / "instructor"))
    assert done.returncode == 0 and "added (22)" in done.stdout, done.stderr
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "the course", cwd=repo)
    api(base, token, "POST", "/hub/api/users", {"usernames": [PULLER]})
    api(base, token, "POST", f"/hub/api/users/{PULLER}/server")
    wait_http(f"{base}/user/{PULLER}/api/status", headers={"Authorization": f"token {token}"}, timeout=150)
    events = git_pull(base, token, PULLER, {"repo": str(repo), "branch": "main", "targetpath": "tracekit-course"})
    assert events and events[-1].get("phase") == "finished", events[-3:]
    home = hub["root"] / hub["marker"] / PULLER / "tracekit-course"
    assert (home / "notebooks" / "02_small_trace.ipynb").is_file()
    assert (home / "exercises" / "ex02_small_trace.ipynb").is_file()
    lesson = nbformat.read(home / "notebooks" / "02_small_trace.ipynb", as_version=4)
    cells = [c.source for c in lesson.cells if c.cell_type == "code" and "tk.lab()" not in c.source][:4]
    session = api(base, token, "POST", f"/user/{PULLER}/api/sessions",
                  {"path": "tracekit-course/exercises/ex02_small_trace.ipynb", "type": "notebook",
                   "name": "ex02", "kernel": {"name": KERNEL}})
    kernel = session["kernel"]["id"]
    ws = f"{base}/user/{PULLER}/api".replace("http://", "ws://") + f"/kernels/{kernel}/channels"
    out = asyncio.run(run_cells(ws, token, [*cells, "import tracekit\nprint(tracekit.__file__)",
                                            'tk.check("ex02")']))
    assert "z = 1.5000, y = 0.8176" in out[0] + out[1] + out[2] + out[3]
    assert out[-2].strip().startswith(str(wheel_venv["python"].parent.parent))  # tracekit from the wheel
    assert out[-1].startswith("ex02 · ") and "0 / 6 points" in out[-1], out[-1]  # one report
    # a student's edit survives the next pull of an updated course (nbgitpuller's merge)
    mine = home / "exercises" / "ex02_small_trace.ipynb"
    mine.write_text(mine.read_text().replace("None", "{}", 1))
    (repo / "notebooks" / "README.md").write_text("Lessons\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "an update", cwd=repo)
    events = git_pull(base, token, PULLER, {"repo": str(repo), "branch": "main", "targetpath": "tracekit-course"})
    assert events[-1].get("phase") == "finished", events[-3:]
    assert (home / "notebooks" / "README.md").is_file() and "{}" in mine.read_text()
    api(base, token, "DELETE", f"/hub/api/users/{PULLER}/server")


def test_two_students_run_a_lesson_on_a_local_jupyterhub(hub):
    base, token = hub["base"], hub["token"]
    api(base, token, "POST", "/hub/api/users", {"usernames": list(USERS)})
    lesson = nbformat.read(ROOT / "notebooks" / "02_small_trace.ipynb", as_version=4)
    cells = [c.source for c in lesson.cells if c.cell_type == "code" and "tk.lab()" not in c.source][:4]
    results = {}
    for user in USERS:
        api(base, token, "POST", f"/hub/api/users/{user}/server")
        wait_http(f"{base}/user/{user}/api/status", headers={"Authorization": f"token {token}"}, timeout=150)
        server = f"{base}/user/{user}/api"
        kernel = api(base, token, "POST", f"/user/{user}/api/kernels", {"name": KERNEL})
        ws = server.replace("http://", "ws://") + f"/kernels/{kernel['id']}/channels"
        results[user] = asyncio.run(run_cells(ws, token, cells))
        api(base, token, "DELETE", f"/user/{user}/api/kernels/{kernel['id']}")
        model = api(base, token, "GET", f"/hub/api/users/{user}")
        assert model["servers"][""]["ready"] is True
    for user in USERS:
        out = "\n".join(results[user])
        assert "z = 1.5000, y = 0.8176" in out
        assert "released after step 2; held by input leaf w" in out
        assert "tape  dy/dx = 0.2983" in out
    running = processes_under(str(hub["root"]))
    assert len(running) >= 4, running  # the hub, the proxy, two single-user servers (this check can see them)
    for user in USERS:
        api(base, token, "DELETE", f"/hub/api/users/{user}/server")
    deadline = time.monotonic() + 60
    while any(api(base, token, "GET", f"/hub/api/users/{u}")["servers"] for u in USERS):
        assert time.monotonic() < deadline, "servers did not stop"
        time.sleep(0.5)
    stop(hub["process"])
    assert hub["process"].returncode is not None
    assert processes_under(str(hub["root"])) == [], "processes left running"
