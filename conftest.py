"""Repository-wide pytest setup: how nbval compares the lesson notebooks, and the memory its kernels
reached (the student-memory test reads it instead of running each lesson a second time)."""

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
from measure_student_memory import tree_rss  # noqa: E402 - the README's memory figures are sampled the same way

NBVAL_KERNEL_PEAKS: dict[str, int] = {}  # lesson file name -> highest RSS of its nbval kernel's process tree
_SAMPLERS: dict[str, tuple[threading.Event, threading.Thread]] = {}


def pytest_collectstart(collector):
    """Compare the text/plain of drawings, not SVG bytes (they differ between Graphviz builds)."""
    if getattr(collector, "fspath", None) is not None and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("image/svg+xml", "stderr")


def pytest_collection_modifyitems(config, items):
    """Every notebook cell carries the `notebooks` marker (deselect with -m 'not notebooks'); the
    student-memory test runs after the notebooks, so that it finds their kernels' peaks measured."""
    for item in items:
        if str(getattr(item, "fspath", "")).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebooks)
    items.sort(key=lambda item: item.get_closest_marker("after_notebooks") is not None)  # a stable sort


def _sample(pid: int, name: str, done: threading.Event) -> None:
    """The kernel's resident memory, with its children, every 50 ms (as tools/measure_student_memory.py)."""
    while not done.wait(0.05):
        NBVAL_KERNEL_PEAKS[name] = max(NBVAL_KERNEL_PEAKS.get(name, 0), tree_rss(pid) or 0)


@pytest.hookimpl(trylast=True)  # after pytest has set up the notebook (its kernel started)
def pytest_runtest_setup(item):
    """The first cell of a notebook under nbval: start sampling its kernel."""
    notebook = item.parent
    kernel = getattr(notebook, "kernel", None)
    name = Path(str(getattr(notebook, "fspath", ""))).name
    if kernel is None or not name.endswith(".ipynb") or name in _SAMPLERS:
        return
    process = getattr(getattr(kernel.km, "provisioner", None), "process", None)
    if process is not None:
        done = threading.Event()
        sampler = threading.Thread(target=_sample, args=(process.pid, name, done), daemon=True)
        sampler.start()
        _SAMPLERS[name] = (done, sampler)


def pytest_runtest_teardown(item, nextitem):
    """The last cell of a notebook: stop sampling (its peak stays in NBVAL_KERNEL_PEAKS)."""
    name = Path(str(getattr(item.parent, "fspath", ""))).name
    if name in _SAMPLERS and (nextitem is None or nextitem.parent is not item.parent):
        done, sampler = _SAMPLERS[name]
        done.set()
        sampler.join()


@pytest.fixture(scope="session")
def nbval_kernel_peaks() -> dict[str, int]:
    """The peaks of the notebooks nbval ran in this session, by file name (empty when it ran none)."""
    return NBVAL_KERNEL_PEAKS


def _machine_busy_s() -> float:
    """CPU seconds this machine has spent busy since boot (all cores, from /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


_CPU_ROWS: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TRACEKIT_TEST_CPU=file: each test's wall time and the machine's busy CPU seconds meanwhile
    (setup and teardown included), for finding where a suite's time goes; run the suite alone for the
    CPU column to be the test's own."""
    if not os.environ.get("TRACEKIT_TEST_CPU"):
        yield
        return
    wall, busy = time.monotonic(), _machine_busy_s()
    yield
    _CPU_ROWS.append(f"{time.monotonic() - wall:.2f}\t{_machine_busy_s() - busy:.2f}\t{item.nodeid}")


def pytest_sessionfinish(session, exitstatus):
    """Write the rows gathered above."""
    if os.environ.get("TRACEKIT_TEST_CPU") and _CPU_ROWS:
        Path(os.environ["TRACEKIT_TEST_CPU"]).write_text("wall_s\tbusy_cpu_s\ttest\n" + "\n".join(_CPU_ROWS) + "\n")
