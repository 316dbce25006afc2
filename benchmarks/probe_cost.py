"""What the build's hook probe costs in time, on run.py's scalar program: tracekit against a copy of
itself whose fill() skips the probe, in one process, each round timing the plain program and then both,
in turns (CPU time). The probe reads each saving node's first raw slot (`_raw_saved_*`) and that slot's
`unpack_hook` before the value, so that tracing never runs a checkpoint's or a user's unpack hook;
the copy without it is not a safe tracer (it would run such a hook), only a measure of the probe.

    python benchmarks/probe_cost.py            # 61 rounds
    python benchmarks/probe_cost.py --rounds 21
"""

from __future__ import annotations

import argparse
import gc
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
PROBE = "            probed = False\n"  # fill()'s line: the first held slot is probed


def without_probe(folder: Path) -> object:
    """tracekit copied into `folder` as `tracekit_without_probe`, its fill() starting each node as probed."""
    target = folder / "tracekit_without_probe"
    shutil.copytree(ROOT / "tracekit", target)
    build = target / "build.py"
    text = build.read_text()
    if text.count(PROBE) != 1:
        raise SystemExit("build.py's probe line is not where this script expects it: update PROBE")
    build.write_text(text.replace(PROBE, "            probed = True  # (no probe: measured only)\n"))
    sys.path.insert(0, str(folder))
    return importlib.import_module("tracekit_without_probe")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    with tempfile.TemporaryDirectory() as folder:
        bare = without_probe(Path(folder))

        def plain() -> None:
            run.scalar_program(x, w, b).backward()

        def traced(module: object) -> None:
            with module.capture() as cap:  # type: ignore[attr-defined]
                y = run.scalar_program(x, w, b)
            cap.trace(y, progress=False).backward()

        programs = {"tracekit": lambda: traced(tk), "without the probe": lambda: traced(bare)}
        for f in (plain, *programs.values(), plain, *programs.values()):
            f()
        ratios: dict[str, list[float]] = {k: [] for k in programs}
        paired = []
        for r in range(args.rounds):
            gc.collect()
            t0 = time.process_time()
            plain()
            base = time.process_time() - t0
            took = {}
            for name in (list(programs) if r % 2 else list(programs)[::-1]):
                gc.collect()
                t0 = time.process_time()
                programs[name]()
                took[name] = time.process_time() - t0
                ratios[name].append(took[name] / base)
            paired.append(took["without the probe"] / took["tracekit"])
    for name, values in ratios.items():
        print(f"{name:18} {statistics.median(values):.3f}× plain (CPU time, median of {args.rounds})")
    print(f"without the probe / tracekit: {statistics.median(paired):.4f} (median of the rounds' ratios; "
          f"the probe's share of the traced program: {1 - statistics.median(paired):.1%})")


if __name__ == "__main__":
    main()
