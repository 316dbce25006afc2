"""tracekit against another tracekit in one process, on run.py's scalar program (capture + trace +
observed backward): each round times the plain program, then both tracekits in turns (CPU time), and
the paired ratio other / this comes from the same round, so a round the machine slows slows both.
Time on a shared machine moves a run.py ratio by up to ~17 %; a paired ratio in one process sees a few
per cent.

    python benchmarks/against.py --rev 081559c        # this tracekit against the one at that commit
    python benchmarks/against.py --without-probe      # against a copy whose fill() skips the hook probe
                                                      # (both with tk.trace, no capture: see below)

The hook probe reads each saving node's first raw slot (`_raw_saved_*`) and that slot's `unpack_hook`
before the value, so that tracing never runs a checkpoint's or a user's unpack hook; the copy without
it is not a safe tracer (it runs such a hook), only a measure of what the probe costs. Under a capture
that saw no saved-tensor hook tracekit skips the probe itself (capture.HookWatch), so --without-probe
times `tk.trace(y)` with no capture, where every trace still probes.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
PROBE = "            probed = unhooked\n"  # fill()'s line: each node's first held slot is probed


def without_probe(folder: Path) -> Any:
    """tracekit copied into `folder` as `tracekit_without_probe`, its fill() starting each node as probed."""
    target = folder / "tracekit_without_probe"
    shutil.copytree(ROOT / "tracekit", target)
    build = target / "build.py"
    text = build.read_text()
    if text.count(PROBE) != 1:
        raise SystemExit("build.py's probe line is not where this script expects it: update PROBE")
    build.write_text(text.replace(PROBE, "            probed = True  # (no probe: measured only)\n"))
    return _imported(folder, target.name)


def at_commit(folder: Path, rev: str) -> Any:
    """tracekit as it was at commit `rev` (instructions.export), imported as `tracekit_at_<rev>` (its
    imports are relative)."""
    from instructions import export

    try:
        target = export(rev, folder)
    except subprocess.CalledProcessError as error:
        raise SystemExit(f"git archive {rev}: {(error.stderr or b'').decode().strip()}") from None
    name = "tracekit_at_" + "".join(c if c.isalnum() else "_" for c in rev)
    (target / "tracekit").rename(target / name)
    return _imported(target, name)


def _imported(folder: Path, name: str) -> Any:
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    other = parser.add_mutually_exclusive_group(required=True)
    other.add_argument("--rev", help="a commit: its tracekit")
    other.add_argument("--without-probe", action="store_true", help="this tracekit without the hook probe")
    parser.add_argument("--rounds", type=int, default=61)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT))
    import run

    import tracekit as tk

    torch.set_num_threads(1)
    x, w, b = (torch.tensor(v, requires_grad=True) for v in (0.5, 0.9, 0.1))
    label = "without the probe" if args.without_probe else f"at {args.rev}"
    with tempfile.TemporaryDirectory() as folder:
        that = without_probe(Path(folder)) if args.without_probe else at_commit(Path(folder), args.rev)

        def plain() -> None:
            run.scalar_program(x, w, b).backward()

        def traced(module: Any) -> None:
            if args.without_probe:  # (under capture neither would probe)
                y = run.scalar_program(x, w, b)
                module.trace(y, progress=False).backward()
                return
            with module.capture() as cap:
                y = run.scalar_program(x, w, b)
            cap.trace(y, progress=False).backward()

        programs = {"this tracekit": lambda: traced(tk), label: lambda: traced(that)}
        for f in (plain, *programs.values(), plain, *programs.values()):
            f()
        timed = run.paired(plain, programs, args.rounds)  # (each round: plain, then both in turns)
    ours, theirs = timed["this tracekit"], timed[label]
    for name, row in timed.items():
        print(f"{name:18} {row['cpu']:.3f}× plain (CPU time, median of {args.rounds})")
    paired = statistics.median(t / o for t, o in zip(theirs["cpu_ratios"], ours["cpu_ratios"]))
    print(f"{label} / this tracekit: {paired:.4f} (median of the rounds' paired ratios)")


if __name__ == "__main__":
    main()
