"""Instructions, not seconds: the capture rows of run.py counted by valgrind's callgrind, which gives
the same count for the same code and inputs whatever else the machine is doing (run.py's CPU-time
ratios swing by 10-20 % between runs on a shared 2-core machine: too much to see a 5 % change).

    python benchmarks/instructions.py                      # each workload: plain, traced, their ratio
    python benchmarks/instructions.py --against d4c80df    # and the same tracekit at another commit
    python benchmarks/instructions.py --workloads scalar --parts
    python benchmarks/instructions.py --parts --variants skeleton   # recount one part, keep the rest

Each workload runs twice to warm up, then once inside a region that a tiny C helper (compiled here
with gcc, from valgrind's callgrind.h) opens and closes with callgrind's client requests: only
that region is instrumented and counted. `--parts` also counts run.py's floor rows (the forward
under an empty TorchFunctionMode; + the reads a trace needs, the walk and one shared pre-hook per
node, with no record: `floor`; for a chain, the reads alone; every read of a captured, observed
trace kept as rows with nothing derived: `skeleton`, benchmarks/skeleton.py), the forward under capture (plain
backward) and capture + trace build (plain backward): what each phase adds. Needs valgrind (with
its headers) and gcc; ~30 s a count, two at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELPER = r"""
#include <valgrind/callgrind.h>
int tk_measure(int (*body)(void)) {
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
    int r = body();
    CALLGRIND_DUMP_STATS_AT("measured");
    CALLGRIND_STOP_INSTRUMENTATION;
    return r;
}
"""
# What runs under valgrind: argv = helper library, workload, variant.
WORKLOAD = r"""
import ctypes, sys, gc
import torch
sys.path.insert(0, %(bench)r)
import run as B
import tracekit as tk
torch.set_num_threads(1)
helper, which, variant = sys.argv[1:4]
if which == "scalar":
    x, w, b = (torch.tensor(v, requires_grad=True) for v in (0.5, 0.9, 0.1))
    forward = lambda: B.scalar_program(x, w, b)
elif which.startswith("chain"):
    forward = None
else:
    net, xx = B.mlp(int(which.removeprefix("mlp"))), torch.randn(32, int(which.removeprefix("mlp")))
    forward = lambda: net(xx).pow(2).mean()

def once():
    if forward is None:  # a deep chain: tk.trace + DOT (no capture, no backward), as run.py's dot rows
        y = B.chain(int(which.removeprefix("chain")))
        if variant == "floor":  # the reads alone
            B.bare_reads([y])
        elif variant != "plain":
            tk.trace(y, progress=False).draw().source
        return
    if variant == "plain":
        forward().backward()
    elif variant == "skeleton":  # every read a captured, observed trace makes, kept with nothing derived
        import skeleton as S
        mode = S.CallMode()
        with mode:
            y = forward()
        S.skeleton_backward(y, S.skeleton_trace([y], mode.calls))
    elif variant in ("mode", "floor"):  # run.py's floor rows: the mode; + the reads, walk and shared hook
        with B._EmptyMode():
            y = forward()
        if variant == "mode":
            y.backward()
        else:
            B._bare_observed_backward(y, B.bare_reads([y])[1])
    else:
        with tk.capture() as cap:
            y = forward()
        if variant == "capture":
            y.backward()
            return
        tr = cap.trace(y, progress=False)
        if variant == "build":
            y.backward()
        else:
            tr.backward()

once(); once()
gc.collect()
body = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: (once(), 0)[1])
ctypes.CDLL(helper).tk_measure(body)
"""


def build_helper(folder: Path) -> Path:
    """The C helper that opens and closes the counted region."""
    source, library = folder / "measure.c", folder / "libmeasure.so"
    source.write_text(HELPER)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True)
    return library


def count(folder: Path, helper: Path, which: str, variant: str, tracekit_path: Path | None) -> int | None:
    """Instructions of one run of `which` (`variant`: plain, traced, ...) inside the counted region (None,
    and valgrind's words on standard error, when the run failed: the other counts are kept)."""
    script = folder / "workload.py"
    if not script.exists():
        script.write_text(WORKLOAD % {"bench": str(ROOT / "benchmarks")})
    out = Path(tempfile.mkdtemp(dir=folder))
    env = dict(os.environ)
    if tracekit_path is not None:  # ahead of the installed tracekit (an editable finder comes after)
        env["PYTHONPATH"] = f"{tracekit_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                           f"--callgrind-out-file={out}/cg.%p", sys.executable, str(script), str(helper), which,
                           variant], capture_output=True, text=True, env=env)
    for dump in out.iterdir():
        text = dump.read_text(errors="replace")
        if "measured" in text:
            found = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
            if found:
                return int(found.group(1))
    print(f"no count for {which} {variant}: valgrind said\n{done.stderr[-2000:]}", file=sys.stderr)
    return None


def export(rev: str, folder: Path) -> Path:
    """tracekit as it was at commit `rev`, in a folder of its own."""
    target = folder / f"tracekit-{rev}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "tracekit"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="scalar,mlp64,mlp128,chain20000")
    parser.add_argument("--against", help="a commit: count its tracekit's traced runs too")
    parser.add_argument("--parts", action="store_true", help="also count each phase on its own")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "instructions.json"))
    parser.add_argument("--variants", help="count only these (e.g. skeleton,floor) and keep --out's other counts: "
                                           "the counts are the same on every run of the same code")
    args = parser.parse_args()
    for tool in ("valgrind", "gcc"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install valgrind gcc")
    folder = Path(tempfile.mkdtemp(prefix="tracekit-instructions-"))
    try:
        helper = build_helper(folder)
        older = export(args.against, folder) if args.against else None
        parts = {"chain": ["floor"], "other": ["mode", "floor", "skeleton", "capture", "build"]} if args.parts else {}
        jobs = [(w, v, None) for w in args.workloads.split(",")
                for v in ["plain", "traced", *parts.get("chain" if w.startswith("chain") else "other", [])]]
        jobs += [(w, "traced", older) for w in args.workloads.split(",")] if older else []
        if args.variants:
            jobs = [job for job in jobs if job[1] in args.variants.split(",") and job[2] is None]
        with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
            counts = list(pool.map(lambda job: count(folder, helper, *job), jobs))
        results: dict[str, dict[str, int]] = {}
        kept = json.loads(Path(args.out).read_text()) if args.variants and Path(args.out).exists() else {}
        if kept:
            results, args.against = kept["instructions"], kept.get("against")
        for (which, variant, path), n in zip(jobs, counts):
            if n is not None:
                results.setdefault(which, {})[variant if path is None else f"traced at {args.against}"] = n
        for which, row in results.items():
            plain = row.get("plain")
            if plain is None:
                print(f"{which}: no plain count, so no ratios: {row}")
                continue
            line = ", ".join(f"{k} {v / 1e6:.1f} M ({v / plain:.3f}× plain)" for k, v in row.items() if k != "plain")
            print(f"{which}: plain {plain / 1e6:.1f} M instructions; {line}")
        Path(args.out).write_text(json.dumps({"against": args.against, "instructions": results}, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if None in counts else 0


if __name__ == "__main__":
    sys.exit(main())
