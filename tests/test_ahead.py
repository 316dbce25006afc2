"""The trusted side's work started beside a submission's sandbox (grading/ahead.py): one reference
measurement per sizes and limits, a failed one tried again, a peak from another way of starting a
sandbox refused, and the judges' truth computed ahead equal to the truth computed when judging."""

import os
import subprocess
import sys
import threading

import pytest

from tracekit.exercises import draw_inputs, get
from tracekit.exercises.judges import ex06 as judge06
from tracekit.exercises.judges import ex07 as judge07
from tracekit.grading import ahead, sandbox


def test_one_measurement_per_sizes_and_a_failed_one_is_tried_again(monkeypatch):
    calls = []
    gate = threading.Event()

    def measure(exercise_id, question, cells, config, **limits):
        calls.append((exercise_id, question, config["n"], limits["memory_mb"]))
        gate.wait(5)
        if len(calls) == 1:
            raise RuntimeError("the sandbox could not start")
        return {"start": "warm", "peak_bytes": 1000 + config["n"], "values": {}, "how": "cgroup"}

    monkeypatch.setattr(sandbox, "measure_reference", measure)
    monkeypatch.setattr(sandbox, "start_kind", lambda: "warm")  # as on a machine with bwrap (the measurements say warm)
    monkeypatch.setattr(ahead, "_PEAKS", {})
    first = ahead.reference_peak("ex06", "q1", {"n": 1}, memory_mb=3072)
    same = ahead.reference_peak("ex06", "q1", {"n": 1}, memory_mb=3072)
    assert same is first  # asked twice while it runs: measured once
    gate.set()
    with pytest.raises(RuntimeError, match="could not start"):
        ahead.comparable_peak(first, "warm")
    again = ahead.reference_peak("ex06", "q1", {"n": 1}, memory_mb=3072)
    assert again is not first and ahead.comparable_peak(again, "warm") == 1001
    other = ahead.reference_peak("ex06", "q1", {"n": 1}, memory_mb=4096)  # other limits: its own measurement
    assert ahead.comparable_peak(other, "warm") == 1001
    assert calls == [("ex06", "q1", 1, 3072), ("ex06", "q1", 1, 3072), ("ex06", "q1", 1, 4096)]
    with pytest.raises(RuntimeError, match="not comparable"):
        ahead.comparable_peak(again, "cold")
    # measured by the sandbox's cgroup, the submission by its largest process (a sandbox without its cgroup)
    assert ahead.comparable_peak(again, "warm", how="cgroup") == 1001
    with pytest.raises(RuntimeError, match="measured by cgroup, the submission by rss: not comparable"):
        ahead.comparable_peak(again, "warm", how="rss")
    # the sandboxes went cold meanwhile: the reference is measured again, as they start now, under its own key
    monkeypatch.setattr(sandbox, "start_kind", lambda: "cold")
    monkeypatch.setattr(sandbox, "measure_reference", lambda *a, **k: {"start": "cold", "peak_bytes": 2000})
    again_cold = ahead.comparable_peak(again, "cold", again=lambda: ahead.reference_peak("ex06", "q1", {"n": 1},
                                                                                        memory_mb=3072))
    assert again_cold == 2000 and ahead.comparable_peak(again, "warm") == 1001  # the warm one kept apart


def test_truth_computed_ahead_is_the_truth_the_judge_uses():
    inputs = draw_inputs(get("ex06"), 12345)
    for cache in (judge06._reference, judge07._workload_sums):
        cache.cache_clear()
    ahead.truth("ex06", inputs).result(timeout=120)
    ahead.truth("ex07", draw_inputs(get("ex07"), 12345)).result(timeout=120)
    assert judge06._reference.cache_info().currsize == 2  # the drawn run, and the measured run's last values
    assert judge07._workload_sums.cache_info().currsize == 2  # the big graphs alive at once, and the measured run
    before = judge06._reference.cache_info().hits
    judge06.measured_reference(inputs["q1"]["measure"]["grade"])
    assert judge06._reference.cache_info().hits == before + 1  # the judge finds it computed


def test_the_measured_runs_truth_is_the_full_loops_last_values():
    """The measured run's truth computes only the diagnostics it compares (the last four): the same numbers
    as the reference loop computing every one, on configs of the grade's and the self-check's kind."""
    for config in ({"seed": 7, "steps": 24, "width": 64, "val_batch": 4096},
                   {"seed": 11, "steps": 6, "width": 32, "val_batch": 512}):
        history, params = judge06.reference(config)
        last, first = judge06.measured_reference(config)
        assert len(last) == 4 and last == history[-4:] and first == params[:16]


LOCKED = '''
import torch
from tracekit.grading import resident
resident.keep_libraries_resident()
size = rss = 0
flags = []
name = None
for line in open("/proc/self/smaps"):
    parts = line.split()
    if "-" in parts[0] and len(parts) >= 5:
        name = parts[5] if len(parts) > 5 else None
        mine = bool(name and name.endswith("libtorch_cpu.so")) and "r" in parts[1] and "w" not in parts[1]
    elif mine and parts[0] in ("Size:", "Rss:"):
        size += int(parts[1]) * (parts[0] == "Size:")
        rss += int(parts[1]) * (parts[0] == "Rss:")
    elif mine and parts[0] == "VmFlags:":
        flags.append("lo" in parts[1:])
print(size, rss, int(all(flags)) * len(flags))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="locking pages needs root (or a large RLIMIT_MEMLOCK)")
def test_the_graders_read_only_library_pages_are_locked_in_memory():
    """Memory pressure evicts mapped pages too; locked, torch's code cannot leave and be read back
    into memory on a sandbox's account (grading/resident.py)."""
    done = subprocess.run([sys.executable, "-c", LOCKED], capture_output=True, text=True, timeout=120, check=True)
    size, rss, locked = (int(x) for x in done.stdout.split())
    # KiB of torch's main library, read-only: every mapping of it locked (smaps' VmFlags `lo`; its
    # `Locked:` is a proportional share, smaller where other processes map the same pages) and in memory
    assert locked and size > 100 << 10 and rss > size * 0.95
