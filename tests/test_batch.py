"""The batch of issue 27: who the students are (decided once, from names that cannot collide),
which files are theirs (read through folder descriptors opened once), the assignment, regrading
by content hash, every outcome named, reports of bounded size, shard merges that refuse
conflicts, a CPU share per sandbox, sandbox uids that are free, and the non-root policy tried as
a real unprivileged user. The fast tests use the real discovery, signing and cgroup code on real
files; the `grading` ones run real sandboxes."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import nbformat
import pytest

from tracekit.errors import GradesConflictError, SubmissionError
from tracekit.grading import isolation, sandbox
from tracekit.grading.gradebook import grades_text as grades_csv
from tracekit.grading.gradebook import write_from
from tracekit.grading.grader import (
    MAX_REPORT_BYTES,
    Options,
    _key,
    folder_for,
    grade_all,
    gradescope,
    load_report,
    make_report,
    student_seed,
    write_report,
)
from tracekit.grading.submission import discover_all, names, read, read_regular

ROOT = Path(__file__).resolve().parent.parent
REF01 = ROOT / "solutions" / "ex01_forward_values.ipynb"
REF02 = ROOT / "solutions" / "ex02_small_trace.ipynb"
REF03 = ROOT / "solutions" / "ex03_storage.ipynb"
BLANK01 = ROOT / "exercises" / "ex01_forward_values.ipynb"
BLANK03 = ROOT / "exercises" / "ex03_storage.ipynb"
ISO = isolation.detect()
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")


def with_cell(base: Path, source: str, where: int = 2) -> nbformat.NotebookNode:
    book = nbformat.read(base, as_version=4)
    book.cells.insert(where, nbformat.v4.new_code_cell(source))
    return book


# ---- identity ----------------------------------------------------------------------------------

def test_names_that_only_look_alike_are_never_merged():
    raws = ["ivan", "ivan\u200b", "iv\u0430n", "ivan\x07", unicodedata.normalize("NFC", "José"),
            unicodedata.normalize("NFD", "José"), "a\\u0301", "a\u0301", "Alice", "alice", "bob"]
    shown, why = names(raws)
    assert len(set(shown.values())) == len(raws)  # one student per exact name, never two names as one
    assert shown["ivan"] == "ivan" and shown["bob"] == "bob" and "bob" not in why
    assert shown["ivan\u200b"] == "ivan\\u200b" and "invisible or control" in why["ivan\u200b"]
    assert shown["iv\u0430n"] == "iv\\u0430n" and "looks like another student's name" in why["iv\u0430n"]
    assert "not in Unicode NFC" in why[unicodedata.normalize("NFD", "José")]
    assert shown["a\\u0301"] == "a\\\\u0301" != shown["a\u0301"]  # a backslash cannot forge an escape
    assert why["ivan"] == "" and why["Alice"] == why["alice"] == ""  # told about, kept as they are


def test_results_folders_cannot_be_squatted():
    victims = ["Zoë", "grades.csv", "Ann Lee", "ivan\u200b", ".hidden"]
    squatters = [folder_for(v) for v in victims] + ["student-" + "0" * 12, "~zo-0123456789abcdef"]
    folders = [folder_for(s) for s in victims + squatters]
    assert len(set(folders)) == len(folders)
    assert folder_for("ann") == "ann" and folder_for("grades.csv").startswith("~")
    assert all(folder_for(f) != f for f in squatters if f.startswith("~"))  # a "~" name is never kept as it is


def test_student_seed_is_a_keyed_63_bit_integer():
    a = student_seed(b"k" * 32, "ex01", "ann")
    assert a == student_seed(b"k" * 32, "ex01", "ann") and 0 <= a < 2**63
    others = {student_seed(b"k" * 32, "ex02", "ann"), student_seed(b"k" * 32, "ex01", "ann\u200b"),
              student_seed(b"j" * 32, "ex01", "ann")}
    assert a not in others and len(others) == 3


# ---- discovery ---------------------------------------------------------------------------------

def test_discovery_names_everything_it_passes_over(tmp_path):
    subs = tmp_path / "subs"
    (subs / "bob" / ".ipynb_checkpoints").mkdir(parents=True)
    shutil.copy(REF01, subs / "bob" / "hw.ipynb")
    shutil.copy(REF01, subs / "bob" / ".old.ipynb")
    (subs / "bob" / ".git").mkdir()
    (subs / ".secret").mkdir()
    shutil.copy(REF01, subs / ".dot.ipynb")
    shutil.copy(REF01, subs / "ann.ipynb")
    (subs / "link.ipynb").symlink_to(REF01)
    (subs / "bob" / "linked").symlink_to(ROOT / "solutions")
    os.mkfifo(subs / "pipe.ipynb")
    with open(subs / "big.ipynb", "wb") as fh:
        fh.truncate(30 << 20)
    (subs / "empty_folder").mkdir()
    (subs / "notes.txt").write_text("x")
    with discover_all(subs) as found:
        assert found.layout == "flat"
        assert {s: [nb.shown for nb in nbs] for s, nbs in found.notebooks.items() if nbs} == \
            {"ann": ["ann.ipynb"], "bob": ["bob/hw.ipynb"]}
        problems = {s: " | ".join(p) for s, p in found.problems.items()}
        assert "bob/.ipynb_checkpoints/ is a hidden folder" in problems["bob"]
        assert "bob/.old.ipynb is a hidden file" in problems["bob"]
        assert "bob/.git/ is a hidden folder" in problems["bob"]
        assert "bob/linked is a symbolic link" in problems["bob"]
        assert "hidden folder" in problems[".secret"] and "hidden file" in problems[".dot"]
        assert "symbolic link" in problems["link"] and "not a regular file" in problems["pipe"]
        assert "30 MB" in problems["big"] and "holds no notebook" in problems["empty_folder"]
        assert found.ignored == ["notes.txt: not a notebook or a folder, not a submission"]


def test_a_student_folder_named_submitted_does_not_switch_the_layout(tmp_path):
    flat = tmp_path / "flat"
    for student in ("submitted", "ann", "bob"):
        (flat / student).mkdir(parents=True)
        shutil.copy(REF01, flat / student / "ex01.ipynb")
    with discover_all(flat) as found:
        assert found.layout == "flat" and sorted(found.notebooks) == ["ann", "bob", "submitted"]
    nb = tmp_path / "course"
    for student in ("ann", "bob"):
        (nb / "submitted" / student / "hw1").mkdir(parents=True)
        shutil.copy(REF01, nb / "submitted" / student / "hw1" / "ex01.ipynb")
    with discover_all(nb) as found:
        assert found.layout == "nbgrader" and sorted(found.notebooks) == ["ann", "bob"]
    (nb / "submitted" / "carl.ipynb").write_text("{}")  # no longer the whole tree: not nbgrader unless asked
    with discover_all(nb) as found:
        assert found.layout == "flat" and sorted(found.notebooks) == ["submitted"]
    with discover_all(nb, layout="nbgrader") as found:
        assert sorted(found.notebooks) == ["ann", "bob", "carl"]


def test_a_folder_swapped_for_a_link_after_discovery_is_not_followed(tmp_path):
    subs, secret = tmp_path / "subs", tmp_path / "secret"
    (subs / "mallory").mkdir(parents=True)
    secret.mkdir()
    shutil.copy(BLANK01, subs / "mallory" / "ex01.ipynb")
    shutil.copy(REF01, secret / "ex01.ipynb")
    with discover_all(subs) as found:
        (nb,) = found.notebooks["mallory"]
        os.rename(subs / "mallory", tmp_path / "moved")
        (subs / "mallory").symlink_to(secret)  # the same path now leads to the solutions
        assert read_regular(nb) == BLANK01.read_bytes()  # through the folder opened at discovery
        assert read(nb, "mallory").code_cells == read(BLANK01, "x").code_cells
        (tmp_path / "moved" / "ex01.ipynb").write_bytes(REF01.read_bytes())  # changed after it was hashed
        with pytest.raises(SubmissionError, match="changed while the batch was running"):
            read_regular(nb)


@pytest.mark.slow  # starts the CLI (imports torch)
def test_a_missing_or_empty_folder_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    for target, said in ((tmp_path / "nope", "no such folder or notebook"), (tmp_path / "empty", "no submissions in")):
        done = subprocess.run([sys.executable, "-m", "tracekit", "grade", str(target), "--out", str(tmp_path / "o")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ---- reports -----------------------------------------------------------------------------------

def _part(score: float, errors: list[str] | None = None, notes: list[str] | None = None) -> dict:
    return {"notebook": "ann.ipynb", "exercise": "ex01", "title": "t", "score": score, "max_score": 5,
            "questions": [{"name": "q1", "prompt": "p", "score": score, "max_score": 5, "message": "m" * 10**6}],
            "sandbox": {"seconds": 1.0, "notes": notes or [], "cell_errors": errors or [], "tampered": []}}


def test_every_outcome_is_named_and_a_report_stays_small_enough_to_verify(tmp_path):
    forged = [f"cell {i}: ValueError: " + "x" * 300 for i in range(40000)]  # 12 MB of error lines
    notes = ["cell 3 was skipped: the time limit ran out (60 CPU-seconds)"]
    report = make_report("ann", [_part(2, ["cell 2: ZeroDivisionError: division by zero", *forged], notes)],
                         [], 1.0, assigned=("ex01",))
    key = _key(tmp_path, create=True)
    write_report(tmp_path, report, key)
    text = (tmp_path / "ann" / "report.json").read_text()
    assert len(text) < MAX_REPORT_BYTES // 20 and load_report(tmp_path, "ann", key) is not None
    problems = " | ".join(report["problems"])
    assert "ann.ipynb: cell 2: ZeroDivisionError: division by zero" in problems
    assert "ann.ipynb: cell 3 was skipped: the time limit ran out" in problems and "more" in problems
    output = json.loads((tmp_path / "ann" / "results.json").read_text())["output"]
    assert "cell 2: ZeroDivisionError" in output and "time limit ran out" in output
    assert gradescope(report)["output"] == output
    doc = gradescope(report)  # a cell's error is the student's text: Gradescope shows it as text, never Markdown
    assert doc["output_format"] == doc["test_output_format"] == "text"
    assert doc["tests"] and all(t["output_format"] == "text" for t in doc["tests"])


def _results(root: Path, student: str, score: float, shard: tuple[int, int]) -> None:
    report = make_report(student, [_part(score)], [], 1.0, assigned=("ex01",), shard=shard)
    write_report(root, report, _key(root, create=True))


@pytest.mark.slow  # starts the CLI (imports torch)
def test_merging_shards_refuses_a_student_graded_twice_with_different_scores(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _results(a, "ann", 5, (1, 2))
    _results(b, "bob", 2, (2, 2))
    _results(c, "ann", 5, (1, 3))  # the same score from a rerun with another shard count
    said: list[str] = []
    rows = list(csv.DictReader(grades_csv([a, b, c], warn=said.append).splitlines()))
    assert [(r["student"], float(r["score"])) for r in rows] == [("ann", 5.0), ("bob", 2.0)]
    assert any("different shard counts" in line for line in said)
    _results(c, "bob", 4, (2, 3))
    with pytest.raises(GradesConflictError, match="'bob' was graded twice with different scores"):
        grades_csv([a, b, c], warn=said.append)
    done = subprocess.run([sys.executable, "-m", "tracekit", "grades", str(a), str(b), str(c)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "different scores" in done.stderr


# ---- sandbox uids ------------------------------------------------------------------------------

@as_root
def test_sandbox_uids_in_use_are_never_leased_and_their_processes_never_killed(monkeypatch):
    # a range of its own: the test leases every uid of it, which would starve a grader running beside it
    # (CI grades in another process at the same time), and that grader's sandboxes hold uids of the default one
    first = isolation.SANDBOX_UID_BASE + isolation.SANDBOX_UID_COUNT + 100
    monkeypatch.setattr(isolation, "SANDBOX_UIDS", range(first, first + 16))
    taken = isolation.SANDBOX_UIDS[3]  # as if a systemd dynamic user or another tool had it
    assert isolation.uid_in_use(taken) is None
    stranger = subprocess.Popen(["setpriv", f"--reuid={taken}", f"--regid={taken}", "--clear-groups",
                                 "sleep", "300"], start_new_session=True)
    try:
        time.sleep(0.3)
        leases = []
        try:
            while True:
                try:
                    leases.append(isolation.lease_uid())
                except RuntimeError as err:
                    assert "taken by users or processes" in str(err)
                    break
            leased = {uid for uid, _ in leases}
            assert taken not in leased and len(leased) > len(isolation.SANDBOX_UIDS) // 2
            assert isolation.uid_in_use(taken) == f"process {stranger.pid} runs as it"
        finally:
            for _, fd in leases:
                os.close(fd)
        uid, fd = isolation.lease_uid()
        os.close(fd)
        assert uid != taken and sandbox._sweep_uid(uid) == 0
        assert stranger.poll() is None  # nothing of the grader touched it
    finally:
        os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait()


# ---- end to end (real sandboxes) ---------------------------------------------------------------

def _grade_cli(subs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "tracekit", "grade", str(subs), "--out", str(out), "--jobs", "2",
                           "--timeout", "300", *extra], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    return done


QUICK = ("--timeout", "20")  # the looping cell is cut after 10 s (half the timeout), not the default 60


@pytest.mark.grading
def test_assignment_regrading_and_outcomes(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "res"
    (subs / "bob").mkdir(parents=True)
    shutil.copy(REF01, subs / "ann.ipynb")
    shutil.copy(REF02, subs / "bob" / "ex02.ipynb")  # not part of the assignment
    nbformat.write(with_cell(BLANK01, "while True:\n    pass"), subs / "bob" / "ex01.ipynb")
    done = _grade_cli(subs, out, "--exercises", "ex01,ex03", *QUICK)
    bob = json.loads((out / "bob" / "report.json").read_text())
    ann = json.loads((out / "ann" / "report.json").read_text())
    assert ann["assigned"] == bob["assigned"] == ["ex01", "ex03"]
    assert (ann["score"], ann["max_score"]) == (5, 9) and (bob["score"], bob["max_score"]) == (0, 9)
    for report in (ann, bob):
        missing = next(p for p in report["exercises"] if p["exercise"] == "ex03")
        assert missing["status"] == "not submitted" and missing["score"] == 0
        assert all(q["message"] == "not submitted" for q in missing["questions"])
    problems = " | ".join(bob["problems"])
    assert "bob/ex02.ipynb: ex02 is not part of this assignment" in problems and "ex03: not submitted" in problems
    assert [p["exercise"] for p in bob["exercises"]] == ["ex01", "ex03"]  # ex02 was not graded
    timed_out = next(p for p in bob["exercises"] if p["exercise"] == "ex01")
    assert timed_out["sha256"] and any("CellTimeout" in e for e in timed_out["sandbox"]["cell_errors"])
    for line in timed_out["sandbox"]["cell_errors"] + timed_out["sandbox"]["notes"]:
        assert f"bob/ex01.ipynb: {line}" in bob["problems"]
    output = json.loads((out / "bob" / "results.json").read_text())["output"]
    assert "CellTimeout" in output and "ex02 is not part of this assignment" in output
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8-sig"))}
    assert rows["ann"]["max_score"] == "9" and "not submitted" in rows["ann"]["problems"]
    # a rerun keeps what did not change, regrades what did, and says which
    done = _grade_cli(subs, out, "--exercises", "ex01,ex03", *QUICK)
    assert "already graded: 2 (unchanged, kept); to grade: 0" in done.stderr
    # without --exercises the folder's assignment stays (its "not submitted" zeros with it), and is said
    done = _grade_cli(subs, out, *QUICK)
    assert "assignment: ex01,ex03 (as this results folder was graded" in done.stderr
    assert "already graded: 2 (unchanged, kept); to grade: 0" in done.stderr
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8-sig"))}
    assert (rows["ann"]["score"], rows["ann"]["max_score"]) == ("5", "9") and rows["ann"]["ex03"] == "0"
    shutil.copy(REF03, subs / "bob" / "ex03.ipynb")
    done = _grade_cli(subs, out, "--exercises", "ex01,ex03", *QUICK)
    assert "already graded: 1" in done.stderr and "regrading bob: changed: bob/ex03.ipynb" in done.stderr
    assert json.loads((out / "bob" / "report.json").read_text())["score"] == 4
    done = _grade_cli(subs, out, "--exercises", "ex01,ex03", *QUICK, "--force")
    assert "to grade: 2" in done.stderr and done.stderr.count("--force") == 2
    done = _grade_cli(subs, out, "--exercises", "ex01,ex03", *QUICK, "--shard", "1/2")
    assert "holds results of a run with another shard count" in done.stderr
    # one notebook, graded as such
    single = _grade_cli(subs / "ann.ipynb", tmp_path / "one")
    assert "1 students found (single layout)" in single.stderr
    assert json.loads((tmp_path / "one" / "ann" / "results.json").read_text())["score"] == 5


@pytest.mark.grading
def test_hostile_names_and_a_live_folder_swap_bend_nothing(tmp_path):
    subs, out, secret = tmp_path / "subs", tmp_path / "res", tmp_path / "solutions"
    subs.mkdir()
    secret.mkdir()
    shutil.copy(REF01, subs / "ivan.ipynb")
    shutil.copy(BLANK01, subs / "ivan\u200b.ipynb")  # sorted first: it used to be graded for ivan
    shutil.copy(BLANK01, subs / "zoe.ipynb")
    shutil.copy(REF01, subs / "zoe\u200b.ipynb")  # a friend's solution, filed under zoe's name
    shutil.copy(BLANK01, subs / "iv\u0430n.ipynb")
    shutil.copy(BLANK01, subs / f"{folder_for('Ann Lee')}.ipynb")  # named like a classmate's results folder
    shutil.copy(REF01, subs / "Ann Lee.ipynb")
    (subs / "mallory").mkdir()
    shutil.copy(BLANK01, subs / "mallory" / "ex01.ipynb")
    shutil.copy(REF01, secret / "ex01.ipynb")
    lines: list[str] = []

    def swap_after_discovery(line: str) -> None:
        lines.append(line)
        if "students found" in line:  # discovery is over, nothing is graded yet
            os.rename(subs / "mallory", tmp_path / "mallory-moved")
            (subs / "mallory").symlink_to(secret)

    reports = {r["student"]: r for r in grade_all(subs, out, Options(timeout=300, jobs=2, cell_timeout=30),
                                                 progress=swap_after_discovery)}
    got = {s: r["score"] for s, r in reports.items()}
    assert got == {"ivan": 5, "ivan\\u200b": 0, "zoe": 0, "zoe\\u200b": 5, "iv\\u0430n": 0, "Ann Lee": 5,
                   folder_for("Ann Lee"): 0, "mallory": 0}
    assert "quarantined" in " ".join(reports["ivan\\u200b"]["problems"])
    assert "looks like this one" in " ".join(reports["ivan"]["problems"])
    write_from([out], out)  # as `tracekit grade` does after grading
    rows = {r["student"]: r["score"] for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8-sig"))}
    assert {k: float(v) for k, v in rows.items()} == got
    manifest = json.loads((out / "students.json").read_text())
    assert len(manifest) == len(got) and set(manifest.values()) == set(got)
    again = grade_all(subs, out, Options(timeout=300, jobs=2), progress=lines.append)
    assert again == [] or [r["student"] for r in again] == ["mallory"]  # her folder is a link now
    write_from([out], out)
    rows = {r["student"]: float(r["score"]) for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8-sig"))}
    assert {k: v for k, v in rows.items() if k != "mallory"} == {k: v for k, v in got.items() if k != "mallory"}


@pytest.mark.grading
@pytest.mark.skipif(not (ISO.cgroup and ISO.cpu and ISO.root), reason="needs root and a cgroup cpu controller")
def test_a_spinner_does_not_starve_the_submission_beside_it(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "res"
    subs.mkdir()
    spin = ("import subprocess, sys\nfor _ in range(100):\n"
            "    subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)")
    book = with_cell(BLANK01, spin)
    for i in range(4):
        book.cells.insert(3 + i, nbformat.v4.new_code_cell("import time\ntime.sleep(9)"))  # alive past its CPU time
    nbformat.write(book, subs / "aaa_spinner.ipynb")  # first in the queue
    shutil.copy(REF01, subs / "honest.ipynb")
    reports = {r["student"]: r for r in grade_all(subs, out, Options(timeout=30, jobs=2, max_pids=128,
                                                                      cell_timeout=15), progress=print)}
    honest = reports["honest"]
    assert honest["score"] == honest["max_score"] == 5, honest["problems"]
    assert reports["aaa_spinner"]["score"] == 0


def _closed_folders(paths: list[str]) -> dict[str, set[str]]:
    """For each folder that others cannot enter on the way to these paths (a pyenv under /root, a
    clone inside a `mktemp -d` folder): the names inside it that the paths go through."""
    closed: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(os.path.realpath(path)).parts
        for depth in range(1, len(parts) - 1):
            folder = os.path.join(*parts[:depth + 1]) if depth else "/"
            if not os.stat(folder).st_mode & 0o001:
                closed.setdefault(folder, set()).add(parts[depth + 1])
    return closed


def _reachable(argv: list[str], paths: list[str]) -> list[str]:
    """`argv` in a private mount namespace where every folder on the way to `paths` can be entered:
    a closed folder is covered by an open tmpfs holding binds of just the names the paths need (so
    the test does not depend on where the checkout or the interpreter lies)."""
    closed = _closed_folders(paths)
    if not closed:
        return argv
    stage = tempfile.mkdtemp(prefix="tracekit-reach-")
    script, i = [], 0
    for folder, inside in sorted(closed.items()):
        for name in sorted(inside):
            script.append(f'mkdir -p "{stage}/{i}" && mount --bind "{folder}/{name}" "{stage}/{i}"')
            i += 1
    i = 0
    for folder, inside in sorted(closed.items()):
        script.append(f'mount -t tmpfs -o mode=0755 tmpfs "{folder}"')
        for name in sorted(inside):
            script.append(f'mkdir -p "{folder}/{name}" && mount --bind "{stage}/{i}" "{folder}/{name}"')
            i += 1
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-ec",
            " && ".join(script) + ' && exec "$@"', "sh", *argv]


@pytest.mark.grading
@as_root
@pytest.mark.skipif(shutil.which("useradd") is None, reason="needs useradd")
def test_non_root_policy_as_a_real_unprivileged_user():
    """A real user (made here with useradd) runs `tracekit grade`: without a cgroup it cannot limit a
    sandbox's processes or total memory, so it refuses without --unsafe, and says what is missing."""
    user = "tkgradetest"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                          capture_output=True, text=True)
    assert made.returncode in (0, 9), made.stderr  # 9: it exists already
    work = Path(tempfile.mkdtemp(prefix="tracekit-nonroot-"))
    try:
        import pwd

        uid = pwd.getpwnam(user).pw_uid
        (work / "subs").mkdir()
        shutil.copy(REF01, work / "subs" / "ann.ipynb")
        for path in (work, work / "subs", work / "subs" / "ann.ipynb"):
            os.chown(path, uid, uid)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "PYTHONPATH": str(ROOT)}

        def as_user(*args: str) -> subprocess.CompletedProcess:
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", sys.executable, "-m",
                    "tracekit", "grade", str(work / "subs"), "--out", str(work / "out"), "--timeout", "300", *args]
            needed = [sys.executable, os.path.realpath(sys.executable), sys.prefix, str(ROOT)]
            return subprocess.run(_reachable(argv, needed), capture_output=True, text=True, timeout=900, env=env,
                                  cwd=work)

        refused = as_user()
        assert refused.returncode == 2 and "--unsafe" in refused.stderr, refused.stderr
        assert "nothing limits a sandbox's processes" in refused.stderr or "namespaces" in refused.stderr
        graded = as_user("--unsafe")
        assert graded.returncode == 0, graded.stderr
        warning = graded.stderr.splitlines()[0]
        assert warning.startswith("WARNING: isolation is INCOMPLETE")
        assert "processes and total memory are not limited" in warning
        assert "process count by RLIMIT_NPROC" not in warning
        report = json.loads((work / "out" / "ann" / "report.json").read_text())
        assert report["score"] == 5, report["problems"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if made.returncode == 0:
            subprocess.run(["userdel", user], capture_output=True)


@pytest.mark.grading
@as_root
@pytest.mark.skipif(not ISO.namespaces, reason="needs bubblewrap")
def test_without_a_cgroup_a_root_grader_still_limits_processes_and_total_memory():
    """No cgroup (TRACEKIT_CGROUP=none, as in a Kubernetes pod): each sandbox's own uid makes
    RLIMIT_NPROC its process count, and the grader polls its total memory."""
    spawn = ("import subprocess\nprocs = []\nfor _ in range(300):\n    try:\n"
             "        procs.append(subprocess.Popen(['sleep', '60']))\n    except OSError:\n        break\n"
             "q1_slots = [len(procs)]")
    hog = ("import subprocess, sys\nchild = 'import time\\nb = b\"x\" * (400 << 20)\\ntime.sleep(20)'\n"
           "kids = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(4)]\n"
           "q2_slots = [k.wait() for k in kids]")
    script = f"""
import json, random
from tracekit.exercises import get
from tracekit.grading import isolation, sandbox
inputs = {{q.name: q.draw(random.Random(1)) for q in get("ex01").questions}}
ran = sandbox.run([{hog!r}, {spawn!r}], "ex01", inputs, timeout=240, memory_mb=1024, max_pids=50)
print(json.dumps({{"iso": isolation.detect().describe(), "obs": ran.observations, "notes": ran.notes,
                  "survivors": ran.survivors}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRACEKIT_CGROUP": "none", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["iso"].startswith("WARNING") and "RLIMIT_NPROC" in got["iso"] and "every 0.2 s" in got["iso"]
    assert 0 < got["obs"]["q1"]["value"][0] < 50  # 300 asked for: the sandbox's uid may have 50
    assert "more than its memory limit" in " ".join(got["notes"]), got  # 4 × 400 MB > 1024 MB
    assert got["survivors"] == 0


@pytest.mark.grading
def test_check_names_what_grade_names_and_a_broken_notebook_is_no_score(tmp_path):
    """`tracekit check` on a notebook whose cell raises or loops says so, as `tracekit grade` lists it,
    and exits 1; `tracekit grade` of a notebook that is not JSON says why, never "0/0", and exits 1."""
    nbformat.write(with_cell(REF01, "1/0"), tmp_path / "raises.ipynb")
    nbformat.write(with_cell(REF01, "while True:\n    pass"), tmp_path / "loops.ipynb")
    for name, said in (("raises", "ZeroDivisionError: division by zero"), ("loops", "CellTimeout")):
        done = subprocess.run([sys.executable, "-m", "tracekit", "check", str(tmp_path / f"{name}.ipynb"),
                               "--timeout", "14"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        assert "5 / 5 points" in done.stdout  # the answers still count; what went wrong is named
        assert any(line.strip().startswith("problem: ") and said in line for line in done.stdout.splitlines())
    (tmp_path / "broken.ipynb").write_text('{"cells": [ {"cell_type": "code", "sou')
    done = subprocess.run([sys.executable, "-m", "tracekit", "grade", str(tmp_path / "broken.ipynb"), "--out",
                           str(tmp_path / "res")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "0/0" not in done.stderr, done.stderr
    assert "broken.ipynb is not a valid notebook (JSON error" in done.stderr.splitlines()[-1]
