"""The built wheel, installed in a new venv with a new HOME (tests/wheel_env.py), used as a student
uses it: the course ships, `tracekit course` and `tracekit lab` work outside the checkout, every bad
path is one line, `tk.check` shows one report in a real kernel, and `tracekit lab` leaves nothing
running after SIGTERM or SIGINT."""

import json
import os
import secrets
import shutil
import signal
import subprocess
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from servers import free_port, processes_under, wait_http
from test_course import BAD_INPUTS, bad_input_folder
from wheel_env import ROOT, clean_env, make_venv, without

from tracekit.serve import _start_time, descendants

pytestmark = pytest.mark.slow


def tracekit(venv: dict, home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The wheel's `tracekit` script, run with `home` as HOME and as working directory."""
    script = venv["python"].parent / "tracekit"
    return subprocess.run([str(script), *args], capture_output=True, text=True, cwd=home, env=clean_env(home),
                          timeout=timeout)


def test_the_wheel_carries_the_package_and_the_course(wheel_venv):
    names = set(zipfile.ZipFile(wheel_venv["wheel"]).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "tracekit").rglob("*.py")
               if "__pycache__" not in p.parts and "judges" not in p.parts}
    assert modules <= names, sorted(modules - names)
    # a student's install: no judges (reference answers, truth of fixed cases), the sealed key instead
    assert not [n for n in names if "judges" in n] and "tracekit/exercises/selfcheck_key.json" in names
    course = {n.removeprefix("tracekit/_course/") for n in names if n.startswith("tracekit/_course/")}
    expected = {f"{folder}/{p.name}" for folder, pattern in (("notebooks", "[0-9]*.ipynb"), ("exercises", "ex*.ipynb"))
                for p in (ROOT / folder).glob(pattern)}
    assert course == expected | {"source/pyproject.toml", "source/README.md"} and len(expected) == 22


def test_course_lab_release_and_version_from_the_wheel(wheel_venv, tmp_path):
    home = tmp_path / "home"
    done = tracekit(wheel_venv, home, "--version")
    assert done.returncode == 0 and done.stdout.strip() == "tracekit 0.1.0"
    where = subprocess.run([str(wheel_venv["python"]), "-c", "import tracekit; print(tracekit.__file__)"],
                           capture_output=True, text=True, cwd=home, env=clean_env(home), check=True).stdout
    assert where.startswith(str(wheel_venv["python"].parent.parent)), where  # the wheel's, not the checkout's
    done = tracekit(wheel_venv, home, "course", "c")
    assert done.returncode == 0, done.stderr
    assert "added (22)" in done.stdout and "open it with: tracekit lab c" in done.stdout
    shipped = (ROOT / "exercises" / "ex01_forward_values.ipynb").read_bytes()
    assert (home / "c" / "exercises" / "ex01_forward_values.ipynb").read_bytes() == shipped
    (home / "c" / "exercises" / "ex01_forward_values.ipynb").write_bytes(shipped.replace(b"None", b"{}", 1))
    again = tracekit(wheel_venv, home, "course", "c")
    assert "kept your version of (1): exercises/ex01_forward_values.ipynb" in again.stdout
    assert "already up to date: 21 files" in again.stdout
    done = tracekit(wheel_venv, home, "lab", "c", "--print-command")
    assert done.returncode == 0 and f"--ServerApp.root_dir={home / 'c'}" in done.stdout
    assert "--LabApp.default_url=/lab/tree/notebooks/01_forward_values.ipynb" in done.stdout
    done = tracekit(wheel_venv, home, "release", "rel")
    assert done.returncode == 0 and len(list((home / "rel").glob("ex*.ipynb"))) == 10


# the wheel's CLI on each bad path, in one process of the wheel's venv (one torch import, not one per case)
BAD_PATHS_IN_ONE_PROCESS = """
import contextlib, io, json, sys
from tracekit.cli import main
said = {}
for case in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(case.split())
        except SystemExit as stop:
            code = stop.code
    said[case] = [code, err.getvalue()]
print(json.dumps(said))
"""


def test_every_bad_path_is_one_line_from_the_wheel(wheel_venv, tmp_path):
    """One case through the `tracekit` script itself, the others through the wheel's `cli.main` in one
    process of its venv (what the script calls): exit 2, one line, the words that say what is wrong."""
    home = tmp_path / "home"
    home.mkdir()
    folder = bad_input_folder(home)
    cases = {case.format(tmp=folder): words for case, words in BAD_INPUTS.items()}
    first = next(c for c in cases if c.startswith("autograder"))  # from a wheel it runs a process of its own
    rest = [c for c in cases if c != first]
    done = tracekit(wheel_venv, home, *first.split())
    said = {first: [done.returncode, done.stderr]}
    ran = subprocess.run([str(wheel_venv["python"]), "-c", BAD_PATHS_IN_ONE_PROCESS, json.dumps(rest)],
                         capture_output=True, text=True, cwd=home, env=clean_env(home), timeout=300)
    assert ran.returncode == 0, ran.stderr
    said.update(json.loads(ran.stdout.splitlines()[-1]))
    assert sorted(said) == sorted(cases)
    for case, (code, stderr) in said.items():
        assert code == 2, (case, stderr)
        assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, (case, stderr)
        assert all(w in stderr for w in cases[case]), (case, stderr)


def test_lab_without_jupyterlab_says_what_to_install(wheel_venv, tmp_path):
    """A venv where JupyterLab is not installed: `tracekit lab` says, in one line, what to run."""
    python = make_venv(tmp_path / "venv", wheel_venv["wheel"], reuse=without(("jupyterlab",), tmp_path / "site"))
    home = tmp_path / "home"
    done = subprocess.run([str(python.parent / "tracekit"), "lab", "c"], capture_output=True, text=True, cwd=home,
                          env=clean_env(home), timeout=300)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"JupyterLab is not installed for {python}: run `{python} -m pip install jupyterlab`" in done.stderr


def test_no_grading_from_the_wheel(wheel_venv, tmp_path):
    """A student's install cannot grade or build a Gradescope bundle (both need the judges it does not
    carry): one line each, saying where to run them; `tk.check` there runs against the sealed key."""
    home = tmp_path / "home"
    home.mkdir()
    done = tracekit(wheel_venv, home, "autograder", "--out", "out/bundle.zip", "--exercises", "ex01")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "judges" in done.stderr and "source checkout" in done.stderr and not (home / "out" / "bundle.zip").exists()
    shutil.copy(ROOT / "solutions" / "ex01_forward_values.ipynb", home / "ann.ipynb")
    done = tracekit(wheel_venv, home, "grade", "ann.ipynb", "--out", "results", "--unsafe")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "judges" in done.stderr and "source checkout" in done.stderr
    script = textwrap.dedent("""
        import importlib.util, sys, torch, tracekit as tk
        sys.path.insert(0, sys.argv[1])
        from answers import SOLUTIONS
        assert importlib.util.find_spec("tracekit.exercises.judges") is None
        for e in ("ex01", "ex02", "ex03", "ex04", "ex05", "ex09"):
            ns = {"torch": torch, "tk": tk}
            for src in SOLUTIONS[e].values():
                exec(src, ns)
            r = tk.check(e, ns)
            print("RESULT", e, r.score, r.max_score, r.note[:60])
    """)
    done = subprocess.run([str(wheel_venv["python"]), "-c", script, str(ROOT / "solutions")], capture_output=True,
                          text=True, cwd=home, env=clean_env(home), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 6 and all(float(line.split()[2]) == float(line.split()[3]) for line in lines), done.stdout
    assert all("against a sealed key" in line for line in lines), lines


def test_check_in_a_notebook_shows_its_report_once(wheel_venv, tmp_path):
    """The exercise notebook run in a real kernel of the wheel's venv: `tk.check` as the cell's value is one
    output (the report, HTML and text), assigned it is still one; never a raw list."""
    home = tmp_path / "home"
    assert tracekit(wheel_venv, home, "course", "c").returncode == 0
    script = textwrap.dedent("""
        import json, sys, nbformat
        from nbclient import NotebookClient
        path = sys.argv[1]
        book = nbformat.read(path, as_version=4)
        book.cells.append(nbformat.v4.new_code_cell('report = tk.check("ex03")\\nprint(type(report).__name__)'))
        NotebookClient(book, timeout=300, resources={"metadata": {"path": sys.argv[2]}}).execute()
        print(json.dumps([c.outputs for c in book.cells if c.cell_type == "code"][-2:]))
    """)
    done = subprocess.run([str(wheel_venv["python"]), "-c", script, "c/exercises/ex03_storage.ipynb", "c/exercises"],
                          capture_output=True, text=True, cwd=home, env=clean_env(home), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    value, assigned = json.loads(done.stdout.splitlines()[-1])
    assert [o["output_type"] for o in value] == ["execute_result"], value
    text = value[0]["data"]["text/plain"]
    assert text.startswith("ex03 · ") and "0 / 4 points" in text and not text.startswith("[")
    assert "<b>ex03 · " in value[0]["data"]["text/html"]
    assert [o["output_type"] for o in assigned] == ["stream", "display_data"], assigned
    assert assigned[0]["text"] == "CheckReport\n" and assigned[1]["data"]["text/plain"] == text


def lab_processes(home: Path) -> list[str]:
    """The processes of a `tracekit lab` under `home`: the server (its root is there) and its kernels
    (their connection files are there)."""
    return processes_under(str(home))


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_lab_stops_jupyterlab_and_its_kernels(wheel_venv, tmp_path, stop_signal):
    home = tmp_path / "home"
    port, token = free_port(), secrets.token_hex(16)
    script = wheel_venv["python"].parent / "tracekit"
    log = (tmp_path / "lab.log").open("wb")
    lab = subprocess.Popen([str(script), "lab", str(home / "c"), "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                            f"--IdentityProvider.token={token}", "--allow-root"],
                           cwd=tmp_path, env=clean_env(home), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/status?token={token}", process=lab, timeout=240)
        assert (home / "c" / "notebooks" / "01_forward_values.ipynb").is_file()  # an empty DIR got the course
        request = f"http://127.0.0.1:{port}/api/kernels?token={token}"
        with urllib.request.urlopen(urllib.request.Request(request, method="POST", data=b"{}"), timeout=120) as r:
            kernel = json.loads(r.read())
        deadline = time.monotonic() + 120
        while not any("ipykernel" in p for p in lab_processes(home)):
            assert time.monotonic() < deadline, lab_processes(home)
            time.sleep(0.5)
        tree = descendants(lab.pid)  # JupyterLab and the kernel it started
        commands = [_command_line(pid) for pid in tree]  # a short-lived helper may have ended meanwhile: ""
        assert any("-m jupyterlab" in c for c in commands), commands
        assert any("ipykernel_launcher" in c and kernel["id"] in c for c in commands), commands
        lab.send_signal(stop_signal)
        assert lab.wait(60) == 128 + stop_signal
        deadline = time.monotonic() + 30
        while lab_processes(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [pid for pid, started in tree.items() if _start_time(pid) == started] == []
        assert lab_processes(home) == [], "processes left running"
    finally:
        if lab.poll() is None:
            lab.kill()
        for line in lab_processes(home):
            os.kill(int(line.split()[0]), signal.SIGKILL)
        log.close()
