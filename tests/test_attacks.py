"""Issue 25: no answer gets a better score by anything its own process does to the grader's view
of it. Every attack is a wrong answer plus a way of hiding it, submitted as a real notebook and
graded by `tracekit grade` in real sandboxes (and a sample through the Gradescope bundle); each
must score less than full. Honest variants that such defences used to cost (module-level state,
first-use imports, a custom autograd.Function) must keep full marks."""

import os
import sys
from pathlib import Path

import nbformat
import pytest

from tracekit.exercises import get
from tracekit.exercises.ex06 import TRAIN
from tracekit.grading import isolation
from tracekit.grading.grader import Options, grade_all

pytestmark = pytest.mark.grading
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "solutions"))
from answers import SOLUTIONS  # noqa: E402

ISO = isolation.detect()
needs_cgroup = pytest.mark.skipif(not (ISO.full and ISO.root), reason="needs root, bubblewrap and a cgroup "
                                  "(CI runs as root): " + "; ".join(ISO.missing))

# ---- wrong answers ------------------------------------------------------------------------------

LEAKY_TRAIN = "KEPT = []\n\n" + TRAIN.format(
    diag="val = model(x_val).pow(2).mean()\n        KEPT.append(val)  # every graph kept\n"
         "        history.append(val.item())", ret="history")
NEVER_FREE = '''STORE = {}
COUNT = [0]


def pack(t):
    COUNT[0] += 1
    STORE[COUNT[0]] = t  # never removed
    return COUNT[0]


def unpack(key):
    return STORE[key]


hooks = (pack, unpack)'''

# ---- ways of hiding them (each its own cell, run before the answer is checked) --------------------

PATCH_METER = '''import tracekit.exercises.watch as W
W.Watch.alive_bytes = lambda self, exclude=(): 0
W.Watch.__torch_dispatch__ = lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))
import torch.utils._python_dispatch as D
D._pop_mode_temporarily = lambda *a, **k: None'''
# find the runner's job and its report channel (through the garbage collector: IPython runs a cell in a
# coroutine, so walking frames stops short of the runner), and forge the measurement before the workload
FORGE_CHANNEL = '''import gc, json, os
emit = next(o for o in gc.get_objects() if callable(o) and getattr(o, "__qualname__", "") == "main.<locals>.emit")
out = next(c.cell_contents for c in emit.__closure__ if isinstance(c.cell_contents, int))
job = next(o for o in gc.get_objects() if isinstance(o, dict) and "measures" in o and "cells" in o)
if job["measures"]:
    name, config = job["measures"][0]
    forged = {"measured": [name, {"values": {"history": [0.0] * 4, "steps": config["steps"], "params": [0.0] * 16},
                                  "peak_bytes": 1, "reference_peak": 10**12, "how": "cgroup"}]}
    os.write(out, (json.dumps({"cells_done": True}) + "\\n" + json.dumps(forged) + "\\n").encode())
    os._exit(0)'''
THREAD = '''import threading, time
HELD = []
threading.Thread(target=lambda: (time.sleep(3600), HELD), daemon=True).start()'''
HELPER_MODULE = '''import sys
with open("/tmp/leaky_helper.py", "w") as fh:
    fh.write("""KEPT = []
def train(model, x, x_val, steps):
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        KEPT.append(val)
        history.append(val.item())
    return history
""")
sys.path.insert(0, "/tmp")'''
HELPER_ANSWER = "from leaky_helper import train"
FREE_BEFORE_REPORT = TRAIN.format(diag="val = model(x_val).pow(2).mean()\n        history.append(val)",
                                  ret="[v.item() for v in history]  # every graph alive until here")
CHILD_PROCESS_STORE = '''import multiprocessing as mp
import torch

_parent, _child = mp.Pipe()


def _keeper(conn):
    kept = []
    while True:
        kept.append(conn.recv())  # holds every tensor it is sent, forever


_proc = mp.get_context("fork").Process(target=_keeper, args=(_child,), daemon=True)
_proc.start()
STORE = {}
COUNT = [0]


def pack(t):
    COUNT[0] += 1
    _parent.send(t.detach().clone().numpy())  # a copy the child keeps: memory outside this process
    STORE[COUNT[0]] = t
    return COUNT[0]


def unpack(key):
    t = STORE[key]
    return t


def _drop(key):
    STORE.pop(key, None)


class Handle(int):
    def __del__(self):
        STORE.pop(int(self), None)


hooks = (lambda t: Handle(pack(t)), lambda h: unpack(int(h)))'''
TMPFS_STORE = '''import os
import torch

COUNT = [0]


class Handle:
    def __init__(self, t):
        COUNT[0] += 1
        self.path = f"/tmp/saved-{COUNT[0]}.pt"
        torch.save(t, self.path)  # on the sandbox's tmpfs, never removed


def unpack(handle):
    return torch.load(handle.path)


hooks = (Handle, unpack)'''

BOUNDED_STORE = '''import collections

STORE = collections.OrderedDict()
COUNT = [0]


def pack(t):
    COUNT[0] += 1
    STORE[COUNT[0]] = t.detach()
    while {size} > {limit} and len(STORE) > 1:  # never lets go on its own: stays small by evicting the oldest
        STORE.popitem(last=False)
    return COUNT[0]


hooks = (pack, lambda key: STORE[key])'''
BYTES = "sum(x.nbytes for x in STORE.values())"
DISK_STORE = '''import os
import tempfile
import torch

COUNT = [0]


class OnDisk:
    """PyTorch's saved-tensor hooks tutorial: a file per saved tensor, removed with the handle."""

    def __init__(self, t):
        COUNT[0] += 1
        self.path = os.path.join(tempfile.gettempdir(), f"saved-{COUNT[0]}.pt")
        torch.save(t.detach(), self.path)

    def __del__(self):
        os.remove(self.path)


hooks = (OnDisk, lambda handle: torch.load(handle.path))'''

# ---- honest variants the old in-process defences cost -----------------------------------------------

STATEFUL_TRAIN = "import itertools\nimport weakref\n\nSTEPS = itertools.count()\nSEEN = weakref.WeakSet()\n" \
    "TABLE = dict(zip(range(3), map(str, range(3))))\n\n" + TRAIN.format(
        diag="val = model(x_val).pow(2).mean()\n        SEEN.add(val)\n        next(STEPS)\n"
             "        import numpy as np  # a first use, inside the measured run\n"
             "        history.append(float(np.float64(val.item())))", ret="history")
FUNCTION_TRAIN = '''class Diag(torch.autograd.Function):
    """A hand-written Function whose forward keeps nothing for backward."""

    @staticmethod
    def forward(ctx, v):
        return v.detach().clone()

    @staticmethod
    def backward(ctx, g):
        return g


''' + TRAIN.format(diag="with torch.no_grad():\n            val = Diag.apply(model(x_val).pow(2).mean())\n"
                        "        history.append(val.item())", ret="history")

CASES = {
    # name: (exercise, {question: answer cell}, [extra cells before the answers], {question: expected})
    "ex06-leak-plain": ("ex06", {"q1": LEAKY_TRAIN}, [], {"q1": 0}),
    "ex06-leak-patch-meter": ("ex06", {"q1": LEAKY_TRAIN}, [PATCH_METER], {"q1": 0}),
    "ex06-leak-forge-channel": ("ex06", {"q1": LEAKY_TRAIN}, [], {"q1": 0}),  # the forge runs after the answer
    "ex06-leak-thread": ("ex06", {"q1": LEAKY_TRAIN.replace("KEPT = []", "from __main__ import HELD as KEPT")},
                         [THREAD], {"q1": 0}),
    "ex06-leak-helper-module": ("ex06", {"q1": HELPER_ANSWER}, [HELPER_MODULE], {"q1": 0}),
    "ex06-leak-freed-before-return": ("ex06", {"q1": FREE_BEFORE_REPORT}, [], {"q1": 0}),
    "ex07-never-free-patch-meter": ("ex07", {"q2": NEVER_FREE}, [PATCH_METER], {"q1": 1, "q2": 1.5}),
    "ex07-child-process-store": ("ex07", {"q2": CHILD_PROCESS_STORE}, [], {"q1": 1, "q2": 1.5}),
    # its files fill the sandbox's tmpfs in the measured workload (run first, in the same sandbox), so its own
    # probe finds the disk full: a store that never frees breaks what runs after it
    "ex07-tmpfs-store": ("ex07", {"q2": TMPFS_STORE}, [], {"q1": 1, "q2": 0}),
    # the class of stores that stay small by evicting entries still in use (by bytes or by count, at any bound):
    # a bound below what 12 big graphs alive at once need loses live entries, one above it keeps too much
    "ex07-evict-over-48mib": ("ex07", {"q2": BOUNDED_STORE.format(size=BYTES, limit=48 << 20)}, [], {"q1": 1, "q2": 0}),
    "ex07-evict-over-400mib": ("ex07", {"q2": BOUNDED_STORE.format(size=BYTES, limit=400 << 20)}, [],
                               {"q1": 1, "q2": 1.5}),
    "ex07-evict-over-40-entries": ("ex07", {"q2": BOUNDED_STORE.format(size="len(STORE)", limit=40)}, [],
                                   {"q1": 1, "q2": 0}),
    "ex07-evict-over-48-entries": ("ex07", {"q2": BOUNDED_STORE.format(size="len(STORE)", limit=48)}, [],
                                   {"q1": 1, "q2": 1.5}),
    "ex08-patch-the-model": ("ex08", {"q1": "def checkpoint_plan(depth):\n    return []"},
                             ["import tracekit.exercises.ex08 as E\nE.checkpointed_loss = E.plain_loss = "
                              "lambda *a: None\nE.MEMORY_BUDGET = 10.0"], {"q1": 0}),
    "honest-ex06-module-state-first-use": ("ex06", {"q1": STATEFUL_TRAIN}, [], {"q1": 4}),
    "honest-ex06-custom-function": ("ex06", {"q1": FUNCTION_TRAIN}, [], {"q1": 4}),
    "honest-ex07-disk-store": ("ex07", {"q2": DISK_STORE}, [], {"q1": 1, "q2": 3}),
    "honest-ex01-custom-function": ("ex01", {}, [], {"q1": 1, "q2": 1, "q3": 3}),
}


def notebook(exercise_id: str, answers: dict[str, str], extra: list[str], forge: bool) -> nbformat.NotebookNode:
    """The student notebook with these answers (the reference elsewhere), extra cells after the imports,
    and (forge) the channel forgery as the last cell before the self-check."""
    book = nbformat.read(ROOT / "exercises" / f"{get(exercise_id).notebook}.ipynb", as_version=4)
    for i, q in enumerate(get(exercise_id).questions):
        cell = book.cells[3 + 2 * i]
        assert cell.cell_type == "code"
        cell.source = answers.get(q.name, SOLUTIONS[exercise_id][q.name])
    for j, src in enumerate(extra):
        book.cells.insert(2 + j, nbformat.v4.new_code_cell(src))
    if forge:
        book.cells.insert(len(book.cells) - 1, nbformat.v4.new_code_cell(FORGE_CHANNEL))
    return book


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    subs, out = root / "subs", root / "results"
    subs.mkdir()
    for name, (exercise_id, answers, extra, _) in CASES.items():
        nbformat.write(notebook(exercise_id, answers, extra, "forge" in name), subs / f"{name}.ipynb")
    reports = grade_all(subs, out, Options(timeout=400, memory_mb=3072, jobs=2), progress=lambda line: None)
    return {r["student"]: r for r in reports}, out


def scores(report: dict) -> dict[str, float]:
    (part,) = report["exercises"]
    return {q["name"]: q["score"] for q in part["questions"]}


@needs_cgroup
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_attack_scores_below_full_and_each_honest_variant_keeps_full_marks(graded, name):
    reports, _ = graded
    expected = CASES[name][3]
    got = scores(reports[name])
    messages = [(q["name"], q["message"]) for p in reports[name]["exercises"] for q in p["questions"]]
    seen = [(q["name"], q.get("measured"), p.get("sandbox"))
            for p in reports[name]["exercises"] for q in p["questions"]]
    assert got == pytest.approx(expected), (got, messages, seen)  # what was measured, and how the sandbox ran
    assert not any("checker could not" in m for _, m in messages), messages


@needs_cgroup
def test_the_memory_verdict_is_the_kernels(graded):
    """The measured bytes in the report are the kernel's, far apart for leaking and honest answers."""
    reports, _ = graded
    leak = next(q for q in reports["ex06-leak-plain"]["exercises"][0]["questions"])["measured"]
    honest = next(q for q in reports["honest-ex06-module-state-first-use"]["exercises"][0]["questions"])["measured"]
    assert leak["how"] == honest["how"] == "cgroup"
    assert leak["peak_bytes"] - leak["reference_peak"] > 200 << 20  # ~15 MiB per kept graph, 24 steps
    assert abs(honest["peak_bytes"] - honest["reference_peak"]) < 64 << 20
    forged = next(q for q in reports["ex06-leak-forge-channel"]["exercises"][0]["questions"])
    assert forged.get("measured", {}).get("peak_bytes", 2) != 1  # the forged "peak_bytes" is never read
    if os.geteuid() == 0:  # root with namespaces and a cgroup: every sandbox forked warm, the reference too
        assert {p["sandbox"]["start"] for r in reports.values() for p in r["exercises"]} == {"warm"}


@needs_cgroup
def test_the_cold_path_gives_the_same_memory_verdicts(tmp_path, monkeypatch):
    """Started cold (a fresh interpreter per sandbox, the reference measured the same way), the
    leaking loop still fails and the honest one passes, with the same margins."""
    monkeypatch.setenv("TRACEKIT_SANDBOX", "cold")
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("ex06-leak-plain", "honest-ex06-module-state-first-use"):
        exercise_id, answers, extra, _ = CASES[name]
        nbformat.write(notebook(exercise_id, answers, extra, False), subs / f"{name}.ipynb")
    reports = {r["student"]: r for r in grade_all(subs, tmp_path / "out", Options(timeout=400, memory_mb=3072, jobs=2),
                                                  progress=lambda line: None)}
    for name, report in reports.items():
        assert scores(report) == pytest.approx(CASES[name][3]), name
        assert report["exercises"][0]["sandbox"]["start"] == "cold"
    leak = next(q for q in reports["ex06-leak-plain"]["exercises"][0]["questions"] if "measured" in q)["measured"]
    assert leak["peak_bytes"] - leak["reference_peak"] > 200 << 20


@needs_cgroup
def test_grading_twice_gives_the_same_scores_and_seeds(graded, tmp_path):
    """A grade is a function of the notebook: a second grader run (--force semantics: a fresh results
    folder with the same secret) gives identical scores and seeds."""
    reports, out = graded
    subs = tmp_path / "subs"
    subs.mkdir()
    pick = ["ex06-leak-plain", "honest-ex01-custom-function"]
    for name in pick:
        exercise_id, answers, extra, _ = CASES[name]
        nbformat.write(notebook(exercise_id, answers, extra, False), subs / f"{name}.ipynb")
    secret = (out / ".tracekit-key").read_bytes()
    again = {r["student"]: r for r in grade_all(subs, tmp_path / "out", Options(timeout=400, memory_mb=3072, jobs=2,
                                                                              secret=secret),
                                                progress=lambda line: None)}
    for name in pick:
        assert scores(again[name]) == scores(reports[name])
        assert again[name]["exercises"][0]["seed"] == reports[name]["exercises"][0]["seed"]
        assert [q["status"] for q in again[name]["exercises"][0]["questions"]] == \
            [q["status"] for q in reports[name]["exercises"][0]["questions"]]


FIRST_RUN_AFTER_EVICTION = '''
import glob, json, os, sys
import torch
from tracekit.exercises import draw_inputs, get
from tracekit.exercises.judges import ex07
from tracekit.grading import sandbox
for f in glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "*.so*")):  # torch's code out of memory
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
sizes = {**draw_inputs(get("ex07"), 1)["q2"]["measure"]["grade"], "seed": 0}
peaks = [sandbox.measure_reference("ex07", "q2", ex07.reference_cells("q2"), sizes, memory_mb=3072)["peak_bytes"]
         for _ in range(2)]
print(json.dumps(peaks))
'''


@needs_cgroup
@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
def test_the_first_sandbox_after_the_libraries_left_memory_is_measured_like_the_next():
    """A sandbox is not charged for reading torch's libraries back into memory (grading/resident.py): the
    first reference run in a fresh grader, after their pages were dropped, peaks as the second does (it
    measured ~16-200 MiB more before, which every memory verdict of that run would have carried)."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-c", FIRST_RUN_AFTER_EVICTION], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = json.loads(done.stdout.splitlines()[-1])
    assert abs(first - second) <= 4 << 20, (first >> 20, second >> 20)
