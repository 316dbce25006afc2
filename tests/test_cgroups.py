"""Sandbox cgroups made by many grading threads at once: every one gets its cgroup, and a sandbox
whose cgroup cannot be made is not run (never measured some other way and compared with a
reference the kernel measured)."""

import threading

import pytest

from tracekit.exercises import draw_inputs, get
from tracekit.grading import isolation, sandbox

ISO = isolation.detect()
needs_cgroup = pytest.mark.skipif(not (ISO.cgroup and ISO.root), reason="needs root and a writable cgroup")


@needs_cgroup
def test_cgroups_made_by_many_threads_at_once_all_exist():
    """The grader makes a cgroup per sandbox from several threads (--jobs, and the reference runs
    beside them): none of them may come back without one (a shared probe folder name once made a
    sandbox run without its cgroup, its memory then read as its largest process's)."""
    made, missing, errors = [], [], []
    start = threading.Barrier(6)

    def make(k: int) -> None:
        start.wait()
        for i in range(40):
            try:
                group = isolation.Cgroup.create(f"tracekit-{isolation.os.getpid()}-race{k}-{i}", 64 << 20, 8)
            except OSError as err:
                errors.append(err)
                continue
            (made if group is not None else missing).append(group)
            if group is not None:
                group.remove()

    threads = [threading.Thread(target=make, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(made), missing, errors) == (240, [], [])


@needs_cgroup
def test_a_sandbox_whose_cgroup_cannot_be_made_is_not_run(monkeypatch):
    """Where this machine has cgroups but one cannot be made for this sandbox, the run is refused with
    the reason: no student code runs without its memory limit, CPU quota and kernel measurement."""
    monkeypatch.setattr(isolation.Cgroup, "create", classmethod(lambda cls, *a, **k: None))
    inputs = draw_inputs(get("ex01"), 1)
    result = sandbox.run(["x = 1"], "ex01", inputs, timeout=60)
    assert result.observations is None
    assert any("cgroup" in n for n in result.notes), result.notes
    assert not result.measured
