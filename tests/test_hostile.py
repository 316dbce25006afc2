"""A hostile class (issue 17): every attack is a real submission graded by the real grader in
real sandboxes, with bounded limits. Each test asserts what the attack was after did not
happen: victims keep their scores, the batch completes, the CSV lists everyone, no sandbox
process survives, and the attacker scores no more than a blank notebook."""

import csv
import hashlib
import json
import os
import shutil
import socket
import time
import unicodedata
from pathlib import Path

import nbformat
import pytest

import tracekit
from tracekit.exercises import get
from tracekit.grading import isolation, sandbox
from tracekit.grading.gradebook import grades_text as grades_csv
from tracekit.grading.gradebook import write_from
from tracekit.grading.grader import KEY, Options, folder_for, grade_all
from tracekit.grading.sandbox import uid_processes

pytestmark = pytest.mark.grading
ROOT = Path(__file__).resolve().parent.parent
BLANK = ROOT / "exercises" / "ex01_forward_values.ipynb"
REF01 = ROOT / "solutions" / "ex01_forward_values.ipynb"
REF02 = ROOT / "solutions" / "ex02_small_trace.ipynb"
ISO = isolation.detect()
needs_isolation = pytest.mark.skipif(not (ISO.full and ISO.root), reason="needs root, bubblewrap and a cgroup "
                                     "(CI runs as root): " + "; ".join(ISO.missing))
SANDBOX_UIDS = isolation.SANDBOX_UIDS
CODE_Q = next(q for q in get("ex01").questions if q.kind == "code")  # the custom Function question
DATA_A, DATA_B = [q.answer for q in get("ex01").questions if q.kind == "data"][:2]  # variables read back


def notebook(base: Path, extra: list[str], where: int = 99) -> nbformat.NotebookNode:
    """A copy of a notebook with code cells inserted at `where` (99: before the last cell)."""
    book = nbformat.read(base, as_version=4)
    at = len(book.cells) - 1 if where == 99 else where
    for i, src in enumerate(extra):
        book.cells.insert(at + i, nbformat.v4.new_code_cell(src))
    return book


def sigmoid_with(attack: str) -> str:
    """A correct custom sigmoid Function whose forward also runs `attack` (indented for forward)."""
    body = "\n".join("        " + line for line in attack.splitlines())
    return (f"import torch\nclass {CODE_Q.answer}(torch.autograd.Function):\n"
            "    @staticmethod\n    def forward(ctx, x):\n"
            "        y = 1 / (1 + torch.exp(-x))\n        ctx.save_for_backward(y)\n"
            f"{body}\n        return y\n\n    @staticmethod\n    def backward(ctx, grad):\n"
            "        (y,) = ctx.saved_tensors\n        return grad * y * (1 - y)\n")


def survivors(marker: str) -> list[int]:
    """Live processes of a sandbox uid whose command line holds `marker` (other graders may be
    running on this machine: only what this test started counts)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid not in SANDBOX_UIDS:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if marker.encode() in fh.read() and int(entry) in uid_processes(os.stat(f"/proc/{entry}").st_uid):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- one hostile class, graded once ------------------------------------------------------------

@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    subs, out = root / "subs", root / "results"
    subs.mkdir()
    out.mkdir()
    shutil.copy(REF01, subs / "victim01.ipynb")
    shutil.copy(REF02, subs / "victim02.ipynb")
    shutil.copy(BLANK, subs / "blank.ipynb")
    # in the run phase: hooks, transformers, patched probes, frozen questions, the judges
    nbformat.write(notebook(BLANK, [
        "ip = get_ipython()\n"
        "ip.events.register('pre_run_cell',\n"
        "                   lambda *a: print('0' * 32, '{\"question\": \"q3\", \"observation\": {}}'))\n"
        "ip.input_transformers_post.append(lambda lines: ['q1_slots = None\\n'])\n"
        "import tracekit.exercises as E\n"
        "E.probe_all = lambda ex, ns, inp: {q.name: {'value': 'forged'} for q in ex.questions}\n"
        "for q in E.get('ex01').questions:\n"
        "    object.__setattr__(q, 'probe', lambda answer, inputs: {'value': ['forged']})\n"
        "try:\n    import tracekit.exercises.judges as J\nexcept ImportError:\n    J = None\n",
        "print('0' * 32, '{\"observations\": {}}')"]), subs / "forger.ipynb")
    # in the probe phase: forge a result line on every descriptor, then exit before the real one
    nbformat.write(notebook(BLANK, [sigmoid_with(
        "import os\nfor fd in range(0, 40):\n    try:\n"
        "        os.write(fd, b'{\"question\": \"q3\", \"observation\": {\"y\": [0.5]}}\\n{\"done\": true}\\n')\n"
        "    except OSError:\n        pass\nos._exit(0)")]), subs / "exitforger.ipynb")
    # the grader, other sandboxes, daemons that outlive the run and rewrite results
    daemon = ("import subprocess, sys\n"
              f"code = 'import os, time\\nfor _ in range(3000):\\n    time.sleep(0.1)\\n    "
              f"[open(os.path.join(d, \"results.json\"), \"w\").write(\"{{}}\") for d in {str(out)!r}.split()]'\n"
              "subprocess.Popen([sys.executable, '-c', code], start_new_session=True)\n"
              "import os\nif os.fork() == 0:\n    os.setsid()\n    subprocess.Popen([sys.executable, '-c', code])\n"
              "    os._exit(0)")
    nbformat.write(notebook(REF01, [daemon, "import os\nos.kill(os.getppid(), 9)", "import os\nos.kill(-1, 9)",
                                    "import os\nos.kill(os.getpid(), 9)"], where=2), subs / "killer.ipynb")
    # the file system of submissions
    shutil.copy(REF01, subs / "grades.csv.ipynb")
    weird = nbformat.read(BLANK, as_version=4)
    book = json.loads(nbformat.writes(weird))
    book["cells"][1]["source"] = 12345
    (subs / "numbersource.ipynb").write_text(json.dumps(book))
    os.mkfifo(subs / "fifo.ipynb")
    (subs / "linkdir").symlink_to(ROOT / "solutions")
    (subs / "linkfile.ipynb").symlink_to(REF01)
    with open(subs / "huge.ipynb", "wb") as fh:
        fh.truncate(150 << 20)  # sparse: 150 MB that must never be read
    copies = subs / "copier"
    copies.mkdir()
    for i in range(3):
        shutil.copy(REF01, copies / f"copy{i}.ipynb")
    nfc, nfd = unicodedata.normalize("NFC", "José"), unicodedata.normalize("NFD", "José")
    shutil.copy(REF01, subs / f"{nfc}.ipynb")
    shutil.copy(BLANK, subs / f"{nfd}.ipynb")
    shutil.copy(BLANK, subs / '=HYPERLINK("x","y").ipynb')
    # results planted before the run: a folder where a report goes, a forged 41/5 report
    (out / "victim01" / "report.json").mkdir(parents=True)
    (out / "victim02").mkdir()
    (out / "victim02" / "report.json").write_text(json.dumps({"student": "victim02", "score": 41, "max_score": 5,
                                                              "exercises": [], "complete": True,
                                                              "signature": "0" * 64}))
    (out / "victim02" / "results.json").write_text('{"score": 41, "max_score": 5}')
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    lines: list[str] = []
    started = time.monotonic()
    reports = grade_all(subs, out, Options(timeout=300, memory_mb=3072, jobs=2), progress=lines.append)
    seconds = time.monotonic() - started
    listener.close()
    time.sleep(1.0)  # any daemon would have written by now
    write_from([out], out)  # as `tracekit grade` does after grading
    rows = list(csv.DictReader((out / "grades.csv").open(encoding="utf-8-sig")))
    return {"subs": subs, "out": out, "reports": {r["student"]: r for r in reports}, "lines": lines,
            "rows": {r["student"]: r for r in rows}, "seconds": seconds}


def total(klass, student):
    report = klass["reports"][student]
    return report["score"], report["max_score"]


def question(klass, student, name):
    return next(q for p in klass["reports"][student]["exercises"] for q in p["questions"] if q["name"] == name)


def test_victims_keep_their_scores_and_the_batch_completes(klass):
    most = get("ex01").max_score
    assert total(klass, "victim01") == (most, most)
    assert total(klass, "victim02") == (get("ex02").max_score, get("ex02").max_score)
    assert klass["lines"][-1].startswith(("isolation: full", "[", "WARNING")) and len(klass["reports"]) >= 12


def test_in_kernel_forgery_in_the_run_phase_gains_nothing(klass):
    assert total(klass, "forger") == total(klass, "blank") == (0, get("ex01").max_score)


def test_forged_lines_and_early_exit_in_the_probe_gain_nothing(klass):
    assert total(klass, "exitforger") == total(klass, "blank")
    assert "stopped while checking" in question(klass, "exitforger", CODE_Q.name)["message"]


@needs_isolation
def test_killing_the_grader_or_everything_in_reach_costs_only_the_cell(klass):
    # kill(getppid) / kill(-1) reach only the killer's own sandbox; the cell that kills its own
    # process is skipped and the notebook re-run without it: its answers still count
    assert total(klass, "killer") == (get("ex01").max_score, get("ex01").max_score)
    notes = " ".join(n for p in klass["reports"]["killer"]["exercises"] for n in p["sandbox"]["notes"])
    assert "was skipped" in notes


@needs_isolation
def test_no_daemon_survives_and_no_result_is_rewritten(klass):
    assert survivors(str(klass["out"])) == []  # the daemons' command lines name the results folder
    for student in klass["reports"]:
        path = klass["out"] / folder_for(student) / "results.json"
        assert json.loads(path.read_text()) != {}, student


def test_links_fifos_huge_and_odd_notebooks_are_reported_not_followed(klass):
    rows = klass["rows"]
    assert "symbolic link" in rows["linkdir"]["problems"] and float(rows["linkdir"]["score"]) == 0
    assert "symbolic link" in rows["linkfile"]["problems"] and float(rows["linkfile"]["score"]) == 0
    assert "not a regular file" in rows["fifo"]["problems"]
    assert "150 MB" in rows["huge"]["problems"]
    assert float(rows["numbersource"]["score"]) == 0 and "numbersource" in klass["reports"]
    assert float(rows["grades.csv"]["score"]) == get("ex01").max_score  # graded, and the CSV is still a file
    assert (klass["out"] / "grades.csv").is_file()


def test_one_notebook_per_exercise_and_scores_clamped(klass):
    report = klass["reports"]["copier"]
    assert total(klass, "copier") == (get("ex01").max_score, get("ex01").max_score)
    assert sum("one notebook per exercise counts" in p for p in report["problems"]) == 2
    for row in klass["rows"].values():
        assert 0 <= float(row["score"]) <= float(row["max_score"])


def test_planted_results_are_not_trusted(klass):
    assert float(klass["rows"]["victim02"]["score"]) == get("ex02").max_score
    assert json.loads((klass["out"] / "victim02" / "results.json").read_text())["score"] == get("ex02").max_score


def test_csv_lists_everyone_escapes_formulas_and_never_merges_unicode_look_alikes(klass):
    students = set(klass["rows"])
    expected = {"victim01", "victim02", "blank", "forger", "exitforger", "killer", "grades.csv", "numbersource",
                "fifo", "linkdir", "linkfile", "huge", "copier", "Jos\\u00e9", "Jose\\u0301",
                "'=HYPERLINK(\"x\",\"y\")"}
    assert students == expected
    nfc, nfd = klass["rows"]["Jos\\u00e9"], klass["rows"]["Jose\\u0301"]  # each graded as herself
    assert "quarantined" in nfc["problems"] and "not in Unicode NFC form" in nfd["problems"]
    assert float(nfc["score"]) == get("ex01").max_score and float(nfd["score"]) == 0
    text = (klass["out"] / "grades.csv").read_text(encoding="utf-8")
    assert '\n"=HYPERLINK' not in text and "\n=HYPERLINK" not in text


def test_failed_parts_say_why(klass):
    for student, row in klass["rows"].items():
        if float(row["score"]) == 0 and student not in ("blank", "forger", "exitforger", "numbersource",
                                                         "'=HYPERLINK(\"x\",\"y\")"):
            assert row["problems"], student


def test_rerun_rederives_results_and_regrades_forged_reports(klass):
    out = klass["out"]
    (out / "victim01" / "results.json").write_text('{"score": 99, "max_score": 5}')  # a forged "done" marker
    report = json.loads((out / "blank" / "report.json").read_text())
    report["score"] = 5
    (out / "blank" / "report.json").write_text(json.dumps(report))  # breaks the signature
    lines: list[str] = []
    reports = grade_all(klass["subs"], out, Options(timeout=300, memory_mb=3072, jobs=2), progress=lines.append)
    assert [r["student"] for r in reports] == ["blank"] and reports[0]["score"] == 0
    assert json.loads((out / "victim01" / "results.json").read_text())["score"] == get("ex01").max_score
    assert (out / KEY).stat().st_mode & 0o077 == 0
    rows = {r["student"]: r for r in csv.DictReader(grades_csv([out]).splitlines())}
    assert float(rows["blank"]["score"]) == 0 and float(rows["victim01"]["score"]) == get("ex01").max_score


# ---- what a sandbox can see and do, read back through a data answer -----------------------------

@needs_isolation
def test_sandbox_sees_no_other_files_processes_or_network(tmp_path):
    secret = tmp_path / "subs"
    secret.mkdir()
    (secret / "other.ipynb").write_text("{}")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    package = Path(tracekit.__file__).resolve().parent
    probe = (
        "import os, sys, socket, subprocess\nfound = []\n"
        "def attempt(label, fn):\n    try:\n        if fn():\n            found.append(label)\n"
        "    except Exception:\n        pass\n"
        f"attempt('other submissions', lambda: os.listdir({str(secret)!r}))\n"
        f"attempt('solutions', lambda: os.listdir({str(ROOT / 'solutions')!r}))\n"
        f"attempt('grader root', lambda: os.listdir('/proc/1/root' + {str(secret)!r}))\n"
        f"attempt('grader pid', lambda: os.kill({os.getpid()}, 0) is None)\n"
        "attempt('other processes', lambda: [p for p in os.listdir('/proc') if p.isdigit() and "
        "b'pytest' in open(f'/proc/{p}/cmdline', 'rb').read()])\n"
        f"attempt('umount', lambda: subprocess.run(['umount', {str(package)!r}],\n"
        "                                           capture_output=True).returncode == 0)\n"
        f"attempt('git', lambda: subprocess.run(['git', '-C', {str(ROOT)!r}, 'show', 'HEAD:solutions/answers.py'], "
        "capture_output=True).returncode == 0)\n"
        f"attempt('write package', lambda: open({str(package / 'exercises' / 'ex09.py')!r}, 'a').write('#'))\n"
        "attempt('write python', lambda: open(os.path.join(sys.prefix, 'evil.pth'), 'w').write('x'))\n"
        f"attempt('network', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))\n"
        "attempt('root', lambda: os.getuid() == 0 or os.geteuid() == 0)\n"
        f"attempt('judges', lambda: __import__('importlib').import_module('tracekit.exercises.judges'))\n"
        f"attempt('judges files', lambda: os.listdir({str(package / 'exercises' / 'judges')!r}))\n"
        f"{DATA_A} = found\n"
        f"{DATA_B} = [os.getuid(), len([p for p in os.listdir('/proc') if p.isdigit()])]\n")
    inputs = {q.name: q.draw(__import__("random").Random(1)) for q in get("ex01").questions}
    target = package / "exercises" / "ex09.py"
    before = digest(target)
    ran = sandbox.run([probe, sigmoid_with("pass")], "ex01", inputs, timeout=240, memory_mb=3072)
    listener.close()
    assert digest(target) == before
    assert ran.observations["q1"] == {"value": []}, ran.observations["q1"]
    uid, processes = ran.observations["q2"]["value"]
    assert uid in SANDBOX_UIDS and processes <= 4  # bwrap's init, the runner, what it started
    assert "error" not in ran.observations[CODE_Q.name] and "missing" not in ran.observations[CODE_Q.name]
    if (package / "exercises" / "judges").is_dir():  # hidden, not absent: the grader itself imports it
        assert __import__("importlib").import_module("tracekit.exercises.judges")
    assert ran.survivors == 0


@needs_isolation
def test_process_disk_and_memory_limits_hold_for_the_whole_sandbox():
    spawn = ("import subprocess\nprocs = []\nfor _ in range(200):\n    try:\n"
             "        procs.append(subprocess.Popen(['sleep', '600'], start_new_session=True))\n"
             "    except OSError:\n        break\n"
             "written = 0\nfor i in range(4):\n    try:\n        with open(f'/tmp/fill{i}', 'wb') as fh:\n"
             "            for _ in range(60):\n"
             "                fh.write(b'x' * (1 << 20))\n                written += 1\n"
             "    except OSError:\n        pass\n"
             f"{DATA_A} = [len(procs), written]\n")
    hog = ("import subprocess, sys\nchild = 'import time\\nb = b\"x\" * (500 << 20)\\ntime.sleep(15)'\n"
           "kids = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(3)]\n"
           f"{DATA_B} = [k.wait() for k in kids]\n")
    inputs = {q.name: q.draw(__import__("random").Random(1)) for q in get("ex01").questions}
    ran = sandbox.run([hog, spawn], "ex01", inputs, timeout=240, memory_mb=1400, max_pids=50, tmpfs_mb=128)
    started, written = ran.observations["q1"]["value"]
    assert 0 < started < 50  # the pids limit covers the whole sandbox (threads included)
    assert 64 <= written < 128  # 64 MB per file (RLIMIT_FSIZE), 128 MB in all (the tmpfs)
    codes = ran.observations["q2"].get("value") or []
    notes = " ".join(ran.notes)
    assert -9 in codes or "memory limit" in notes, (codes, notes)  # 3 × 500 MB > 1400 + 64 MB
    assert ran.survivors == 0 and survivors("sleep") == []


@needs_isolation
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_what_the_student_process_holds(monkeypatch, start):
    """From inside, on both paths: no capability in any set, no new privileges, not PID 1, a uid of
    its own, a hostname, namespaces of its own (none shared with the grader), and a descriptor table
    of stdin/stdout/stderr plus the runner's two pipe ends."""
    monkeypatch.setenv("TRACEKIT_SANDBOX", start)
    look = ("import os, socket\nst = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
            f"{DATA_A} = [st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs')]\n"
            f"{DATA_B} = [os.getpid(), os.getuid(), socket.gethostname(), "
            "{n: os.readlink(f'/proc/self/ns/{n}') for n in ('mnt', 'pid', 'net', 'ipc', 'uts', 'user')}, "
            "[os.readlink(f'/proc/self/fd/{fd}') for fd in os.listdir('/proc/self/fd') "
            "if os.path.lexists(f'/proc/self/fd/{fd}')]]\n")
    inputs = {q.name: q.draw(__import__("random").Random(1)) for q in get("ex01").questions}
    ran = sandbox.run([look], "ex01", inputs, timeout=240, memory_mb=3072)
    assert ran.start == start
    assert ran.observations["q1"]["value"] == ["0000000000000000"] * 5 + ["1"]
    pid, uid, host, spaces, fds = ran.observations["q2"]["value"]
    assert pid != 1 and uid in SANDBOX_UIDS and host == "tracekit-sandbox"
    ours = {n: os.readlink(f"/proc/self/ns/{n}") for n in spaces}
    assert all(spaces[n] != ours[n] for n in spaces), (spaces, ours)
    # stdin (/dev/null), stdout + stderr, the runner's channel and the grader's word (pipes), IPython's history
    # database on the sandbox's own tmpfs (and the folder listdir had open): nothing of the grader's or the parent's
    assert fds[0] == "/dev/null" and sum(f.startswith("pipe:") for f in fds) == 4, fds
    assert all(f.startswith(("pipe:", "/dev/null", "/tmp/home/.ipython/", "/proc/")) for f in fds), fds


@needs_isolation
@pytest.mark.parametrize("line", [b"{}\n", b"[" + b"{}," * 4000 + b"{}]\n"], ids=["many-lines", "many-items"])
def test_output_is_capped_by_items_not_only_bytes(line):
    """Millions of tiny JSON values on the grader's own channel (its descriptor found through the
    garbage collector, in the runner's `emit` closure) cost the sandbox, not the grader: it is
    stopped once it sent more lines or values than the grader reads, well under the byte cap, and
    the cell that did it is skipped."""
    flood = ("import gc, os\nemit = next(o for o in gc.get_objects() if callable(o) and "
             "getattr(o, '__qualname__', '') == 'main.<locals>.emit')\n"
             "fd = next(c.cell_contents for c in emit.__closure__ if isinstance(c.cell_contents, int))\n"
             f"chunk = {line!r} * 1000\nfor _ in range(2000):\n    os.write(fd, chunk)\n")
    inputs = {q.name: q.draw(__import__("random").Random(1)) for q in get("ex01").questions}
    ran = sandbox.run([flood, sigmoid_with("pass")], "ex01", inputs, timeout=240, memory_mb=3072)
    assert "cell 1 was skipped: it sent more than the grader reads" in ran.notes, ran.notes
    assert "error" not in ran.observations[CODE_Q.name] and "missing" not in ran.observations[CODE_Q.name]
    assert ran.survivors == 0


def test_strict_policy_on_this_machine():
    # the non-root policy is tried as a real unprivileged user in tests/test_batch.py
    from tracekit.grading import grader

    if ISO.full:
        assert grader.check_isolation(Options(strict=True)) == ISO
    else:
        with pytest.raises(grader.IsolationError, match="--strict"):
            grader.check_isolation(Options(strict=True))


