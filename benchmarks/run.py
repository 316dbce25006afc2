"""tracekit benchmarks: ratios measured in one run, against plain PyTorch and torchviz.

    python benchmarks/run.py            # everything; prints a table, writes benchmarks/results.json
    python benchmarks/run.py --quick    # smaller sizes (what CI could afford): benchmarks/results-partial.json
    python benchmarks/run.py --only capture,dot                # results-partial.json too (--out to choose)
    python benchmarks/run.py --only capture --rounds 21   # more rounds per row: a steadier median

Targets (issue 37, each a ratio measured in this one run, the median of several interleaved
repeats): capture + trace + observed backward ≤ 1.5× a plain forward+backward on a 1,500-module
MLP (Linear 64→64, LayerNorm, GELU ×500, batch 32), ≤ 1.35× at width 128, ≤ 2.6× with scalar
tensors (~4k nodes); trace + DOT ≤ 0.4× torchviz `make_dot(show_saved=True)` at 800 nodes; a
100k-node trace + DOT ≤ 1 s; `--only phases` gives each phase's cost in µs per node; nbval over
the lessons and grading per submission: reported.
Earlier targets (issue 7): a 12-block model drawn (repeats collapsed) to SVG under 5 s;
predicted vs measured saved bytes within 1 %; grading ≤ 3 s per submission beyond the
notebook's own run time.

The capture rows run PyTorch on one intra-op thread (on a shared 2-core machine two threads spin
against each other and the plain baseline swings by 10×) and give two ratios: CPU time of this
process (what the targets are, and what a row is judged on) and wall clock. Each round times the plain
program, the floors, tracekit and the plain program again (its ratio to the first: how far the machine
alone moves a ratio), each after a full collection (see `paired`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import tracekit as tk
from tracekit.render.svg import renderer

ROOT = Path(__file__).resolve().parent.parent
RESULTS: list[dict] = []
ROUNDS: int | None = None  # --rounds: the capture, floor and phases rows' rounds (their defaults: 7, 11, 9)


def record(name: str, measured: float, target: str, ok: bool | None, unit: str, note: str = "",
           **extra: object) -> None:
    RESULTS.append({"benchmark": name, "measured": round(measured, 4), "unit": unit, "target": target,
                    "met": ok, **extra})
    flag = {True: "met", False: "MISSED", None: "-"}[ok]
    print(f"{name:72} {measured:9.3f} {unit:3} target {target:16} {flag:6} {note}", flush=True)


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def interleaved(base, ours, repeat: int, setup=None) -> dict[str, float]:
    """Median ratios ours/base over `repeat` rounds, each round timing both back to back (`setup`, when
    given: made untimed before each call and passed to it, e.g. a graph neither side has read before)."""
    wall, cpu, times = [], [], []
    for _ in range(repeat):
        if setup is None:
            (bw, bc), (ow, oc) = timed(base), timed(ours)
        else:
            a, b = setup(), setup()
            (bw, bc), (ow, oc) = timed(lambda a=a: base(a)), timed(lambda b=b: ours(b))
            del a, b
        wall.append(ow / bw)
        cpu.append(oc / bc)
        times.append((bw, ow))
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu),
            "base_s": statistics.median(t[0] for t in times), "ours_s": statistics.median(t[1] for t in times),
            "wall_ratios": [round(r, 3) for r in wall]}


# 1. capture overhead ----------------------------------------------------------------------------

class Block(torch.nn.Module):
    """A small transformer-like block: attention-ish mixing, layer norms, an MLP."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        att = torch.softmax(self.q(h) @ self.k(h).transpose(-1, -2) / h.shape[-1] ** 0.5, dim=-1)
        x = x + self.o(att @ self.v(h))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


def model(blocks: int, d: int = 32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[Block(d) for _ in range(blocks)])


def mlp(width: int) -> torch.nn.Module:
    """The issue's model: Linear(width, width), LayerNorm, GELU, 500 times (1,500 modules)."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(500):
        layers += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


def scalar_program(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, steps: int = 800) -> torch.Tensor:
    """A scalar recurrence, h = tanh(w·h + b) + 0.1·h: four tiny nodes per step."""
    h = x
    for _ in range(steps):
        h = torch.tanh(w * h + b) + 0.1 * h
    return h


def bench_capture(quick: bool) -> None:
    """The capture rows, each round timing the plain program, two floors and tracekit back to back: the
    floors' ratios come from the same rounds as tracekit's, so a floor above a target is shown round by round."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    repeat = ROUNDS or (3 if quick else 7)
    try:
        setups: list[tuple[str, Any, float]] = [
            (f"capture+trace+observed bwd / plain, MLP width {width}, batch 32",
             (lambda net, x: lambda: net(x).pow(2).mean())(mlp(width), torch.randn(32, width)), target)
            for width, target in ((64, 1.5), (128, 1.35))]
        x, w, b = (torch.tensor(v, requires_grad=True) for v in (0.5, 0.9, 0.1))
        setups.append(("the same with scalar tensors (tanh recurrence)", lambda: scalar_program(x, w, b), 2.6))
        for label, forward, target in setups:
            _capture_row(label, forward, target, repeat)
    finally:
        torch.set_num_threads(threads)


def _floors(forward: Any) -> dict[str, Any]:
    """The floors under a capture row, as programs: the reads a trace needs with no record under an
    empty mode and one shared pre-hook (bare_reads); every read of a captured, observed trace kept as
    rows with nothing derived (skeleton.py); and, where a C++ compiler is found, bare_reads with its
    reads made in one C++ call per graph (cpp_reads.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cpp_reads import cpp_reads, reader
    from skeleton import CallMode, skeleton_backward, skeleton_trace  # this tracekit's internals: imported here

    def reads() -> None:
        with _EmptyMode():
            loss = forward()
        _bare_observed_backward(loss, bare_reads([loss])[1])

    def every_read() -> None:
        mode = CallMode()
        with mode:
            loss = forward()
        skeleton_backward(loss, skeleton_trace([loss], mode.calls))

    floors = {"bare_reads": reads, "skeleton": every_read}
    if not isinstance(reader(), str):  # the same reads in C++ (cpp_reads.cpp), where it compiles
        def reads_in_cpp() -> None:
            with _EmptyMode():
                loss = forward()
            _bare_observed_backward(loss, cpp_reads([loss])[1])

        floors["cpp_reads"] = reads_in_cpp
    return floors


def paired(base: Any, others: dict[str, Any], repeat: int) -> dict[str, dict[str, Any]]:
    """Per program in `others`: its CPU-time and wall ratios to `base`, each round timing `base` and then
    every program back to back, in an order turned by one each round; each after a full collection
    (untimed), so that a program pays for the collections its own objects start, not for the garbage
    of the one before it. Medians, and the CPU ratios round by round (one plain run per round: a slow
    one lowers every ratio of its round together)."""
    cpu: dict[str, list[float]] = {k: [] for k in others}
    wall: dict[str, list[float]] = {k: [] for k in others}
    secs: dict[str, list[float]] = {k: [] for k in ("base", *others)}
    names = list(others)
    for k in range(repeat):
        gc.collect()
        bw, bc = timed(base)
        secs["base"].append(bw)
        for name in names[k % len(names):] + names[:k % len(names)]:
            gc.collect()
            w, c = timed(others[name])
            cpu[name].append(c / bc)
            wall[name].append(w / bw)
            secs[name].append(w)
    return {name: {"cpu": statistics.median(cpu[name]), "wall": statistics.median(wall[name]),
                   "cpu_ratios": [round(r, 3) for r in cpu[name]], "wall_ratios": [round(r, 3) for r in wall[name]],
                   "base_s": statistics.median(secs["base"]), "ours_s": statistics.median(secs[name])}
            for name in others}


class _EmptyMode(TorchFunctionMode):
    """A TorchFunctionMode that only calls through: what tk.capture()'s mechanism costs by itself."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _bare_observed_backward(loss: torch.Tensor, hooks: dict | None = None) -> None:
    """One shared pre-hook per node (the engine names the node), then backward: what tracekit's
    observation costs with no bookkeeping at all. `hooks`: the hook dict bare_reads registered
    while it walked (as tk.trace registers it); without, the graph is walked here to register it."""
    from tracekit.internals import CURRENT_NODE, PreHook, shared_hook_dict
    from tracekit.keeper import gc_paused
    from tracekit.live import is_leaf_node, walk

    calls: list[object] = []
    with gc_paused():  # as tracekit's observed backward runs
        if hooks is None:
            hooks = shared_hook_dict([n for n in walk([loss.grad_fn]) if not is_leaf_node(n)])
        hook = PreHook(None, lambda _grad, node=None: calls.append(node or CURRENT_NODE()), hooks)
        loss.backward()
        hook.remove()


def bare_reads(outputs: list[torch.Tensor]) -> tuple[list[tuple], dict]:
    """The facts a trace must read while the graph holds them (it keeps no tensor, and backward frees
    them), with none of tracekit's record: the walk in forward order, each node's inputs, and per
    saved tensor its raw slot, the value, storage (address, size, weak reference), shape, dtype,
    bytes, version, producer and, for at most 4 elements, its values. One tuple per saved tensor;
    and the empty hook dict registered on every node (as the build registers it, for the observer).
    The cycle collector is paused meanwhile, as tk.trace pauses it (with it running, its passes over
    the objects the reads make cost ~40 % more at 100k nodes: last round's floor row had them)."""
    from tracekit.keeper import gc_paused

    with gc_paused():
        return _bare_reads(outputs)


def _bare_reads(outputs: list[torch.Tensor]) -> tuple[list[tuple], dict]:
    from tracekit.internals import shared_hook_dict, storage_weak_ref, tensor_attributes, version
    from tracekit.live import forward_order, walk
    from tracekit.storage import drop_weak_ref

    nodes = forward_order(walk([t.grad_fn for t in outputs]))
    position = {g: i for i, g in enumerate(nodes)}
    storages: dict[tuple, int] = {}
    weaks: list[tuple[int, int]] = []
    out: list[tuple] = []
    for i, g in enumerate(nodes):
        inputs = tuple([position.get(k) for k, _ in g.next_functions])
        for slot, raw_attr, value_attr in tensor_attributes(type(g)):
            raw = getattr(g, raw_attr, None)
            if raw is None or isinstance(raw, (tuple, list)) or raw.unpack_hook is not None:
                continue
            t = getattr(g, value_attr)
            if t is None:
                continue
            s = t.untyped_storage()
            key = ("cpu" if t.is_cpu else str(t.device), s.data_ptr())
            k = storages.get(key)
            if k is None:
                k = storages[key] = len(weaks)
                weaks.append((s.nbytes(), storage_weak_ref(s)))
            numel, producer = t.numel(), t.grad_fn
            out.append((i, slot, inputs, tuple(t.shape), t.dtype, numel * t.element_size(), k,
                        position.get(producer) if producer is not None else None, version(t),
                        t.tolist() if numel <= 4 else None))
    for _, ref in weaks:
        drop_weak_ref(ref)
    return out, shared_hook_dict(nodes)


def bench_floor(quick: bool) -> None:
    """The floor under the capture rows: the same programs with tracekit's mechanisms and none of its
    bookkeeping (an empty TorchFunctionMode; + the walk and one shared pre-hook per node; + the reads
    after the forward), then the skeleton: every read a captured, observed trace makes (per torch call,
    per saved tensor, per backward step), kept as one tuple per row with nothing derived."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    repeat = ROUNDS or (5 if quick else 11)
    try:
        x0, w0, b0 = (torch.tensor(v, requires_grad=True) for v in (0.5, 0.9, 0.1))
        programs = [(f"MLP width {w}", (lambda net, x: lambda: net(x).pow(2).mean())(mlp(w), torch.randn(32, w)))
                    for w in (64, 128)]
        programs.append(("scalar tanh recurrence", lambda: scalar_program(x0, w0, b0)))
        for label, forward in programs:
            def plain(forward=forward) -> None:
                forward().backward()

            def mode_only(forward=forward) -> None:
                with _EmptyMode():
                    loss = forward()
                loss.backward()

            def mechanisms(forward=forward) -> None:
                with _EmptyMode():
                    loss = forward()
                _bare_observed_backward(loss)

            floors = _floors(forward)

            for name, ours in (("an empty TorchFunctionMode alone", mode_only),
                               ("+ graph walk + one shared pre-hook per node", mechanisms),
                               ("+ the reads a trace needs, no record (bare_reads)", floors["bare_reads"]),
                               ("every read of a captured, observed trace, as rows (skeleton.py)", floors["skeleton"]),
                               *((("bare_reads with its reads in C++ (cpp_reads.py)", floors["cpp_reads"]),)
                                 if "cpp_reads" in floors else ())):
                ours()
                r = paired(plain, {name: ours}, repeat)[name]  # as the capture rows time them
                record(f"floor, {label}: {name} / plain", r["cpu"], "-", None, "×",
                       note=f"CPU-time ratio (wall {r['wall']:.2f}×)", wall_ratio=round(r["wall"], 4))
    finally:
        torch.set_num_threads(threads)


def bench_phases(quick: bool) -> None:
    """Where the capture rows' time goes: CPU milliseconds per phase (medians), plain, traced, and the
    skeleton's same three phases (benchmarks/skeleton.py) in the same rounds, each after a full collection."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from skeleton import CallMode, skeleton_backward, skeleton_trace  # this tracekit's internals: imported here

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    repeat = ROUNDS or (5 if quick else 9)
    phases = ("forward under capture", "trace build", "observed backward")
    try:
        nets = {w: (mlp(w), torch.randn(32, w)) for w in (64, 128)}
        x0, w0, b0 = (torch.tensor(v, requires_grad=True) for v in (0.5, 0.9, 0.1))
        setups = [(f"MLP width {w}", lambda net=net, x=x: net(x).pow(2).mean()) for w, (net, x) in nets.items()]
        for label, forward in (*setups, ("scalar tanh recurrence", lambda: scalar_program(x0, w0, b0))):
            times: dict[str, list[float]] = {k: [] for k in ("plain forward", "plain backward", *phases)}
            skeleton: dict[str, list[float]] = {k: [] for k in phases}
            nodes = 0
            for _ in range(repeat):
                gc.collect()
                t0 = time.process_time()
                loss = forward()
                t1 = time.process_time()
                loss.backward()
                t2 = time.process_time()
                gc.collect()
                c0 = time.process_time()
                with tk.capture() as cap:
                    loss = forward()
                t3 = time.process_time()
                tr = quiet_trace(cap, loss)
                t4 = time.process_time()
                tr.backward()
                t5 = time.process_time()
                nodes = len(tr.nodes)
                for k, v in zip(list(times), (t1 - t0, t2 - t1, t3 - c0, t4 - t3, t5 - t4)):
                    times[k].append(v)
                del tr, loss
                gc.collect()
                s0 = time.process_time()
                mode = CallMode()
                with mode:
                    loss = forward()
                s1 = time.process_time()
                rows = skeleton_trace([loss], mode.calls)
                s2 = time.process_time()
                skeleton_backward(loss, rows)
                s3 = time.process_time()
                for k, v in zip(phases, (s1 - s0, s2 - s1, s3 - s2)):
                    skeleton[k].append(v)
                del rows, loss, mode
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            sk = {k: statistics.median(v) * 1e3 for k, v in skeleton.items()}
            extra = {"forward under capture": med["forward under capture"] - med["plain forward"],
                     "trace build": med["trace build"],
                     "observed backward": med["observed backward"] - med["plain backward"]}
            for k, ms in med.items():
                note = (f"+{extra[k] * 1e3 / nodes:.0f} µs per node; the skeleton's {sk[k]:.1f} ms"
                        if k in extra else "")
                record(f"phase, {label} ({nodes} nodes): {k}", ms, "-", None, "ms", note=note,
                       skeleton_ms=sk.get(k))
    finally:
        torch.set_num_threads(threads)


def quiet_trace(cap: object, y: torch.Tensor) -> tk.Trace:
    """cap.trace(y) (or tk.trace(y)) without the progress line a slow (loaded) machine would otherwise print."""
    try:
        return cap.trace(y, progress=False)
    except TypeError:  # a tracekit from before the progress line
        return cap.trace(y)


def _capture_row(label: str, forward: Any, target: float, repeat: int) -> None:
    """One capture row: capture + trace + observed backward of `forward` against plain, with its floors
    from the same rounds (and how many rounds had each floor above the target by itself)."""
    def plain() -> None:
        forward().backward()

    def captured() -> None:
        with tk.capture() as cap:
            loss = forward()
        quiet_trace(cap, loss).backward()

    nodes = len(tk.trace(forward()).nodes)
    def plain_again() -> None:  # the same program as the base: how far the machine alone moves a ratio
        forward().backward()

    programs = {**_floors(forward), "tracekit": captured, "plain again": plain_again}
    for fn in (plain, *programs.values()):
        fn()
    r = paired(plain, programs, repeat)
    ours, floor, skeleton, null = r["tracekit"], r["bare_reads"], r["skeleton"], r["plain again"]
    above = {k: sum(x > target for x in r[k]["cpu_ratios"]) for k in r if k not in ("tracekit", "plain again")}
    over_skeleton = statistics.median(t / s for t, s in zip(ours["cpu_ratios"], skeleton["cpu_ratios"]))
    cpp = r.get("cpp_reads")
    if cpp is not None:
        in_cpp = f"; bare_reads in C++ {cpp['cpu']:.2f}× ({above['cpp_reads']}/{repeat})"
    else:
        from cpp_reads import reader  # (on the path: _floors put it there)
        in_cpp = f"; no C++ floor ({reader()})"
    record(f"{label} ({nodes} nodes)", ours["cpu"], f"≤ {target}×", ours["cpu"] <= target, "×",
           note=f"CPU time (wall {ours['wall']:.2f}×); plain {ours['base_s'] * 1e3:.0f} ms; same rounds: "
                f"bare_reads {floor['cpu']:.2f}× (over the target in {above['bare_reads']}/{repeat}), "
                f"skeleton {skeleton['cpu']:.2f}× ({above['skeleton']}/{repeat}){in_cpp}; tracekit / skeleton "
                f"{over_skeleton:.2f}×; plain again / plain {null['cpu']:.2f}× (rounds "
                f"{min(null['cpu_ratios']):.2f}–{max(null['cpu_ratios']):.2f})",
           cpu_ratio=round(ours["cpu"], 4), wall_ratio=round(ours["wall"], 4), plain_s=ours["base_s"],
           captured_s=ours["ours_s"], nodes=nodes,
           wall_ratios=ours["wall_ratios"], cpu_ratios=ours["cpu_ratios"],
           fixed_cost_us_per_node=(ours["ours_s"] - ours["base_s"]) / nodes * 1e6,
           bare_reads_cpu_ratio=round(floor["cpu"], 4), bare_reads_cpu_ratios=floor["cpu_ratios"],
           skeleton_cpu_ratio=round(skeleton["cpu"], 4), skeleton_cpu_ratios=skeleton["cpu_ratios"],
           rounds_bare_reads_over_target=above["bare_reads"], rounds_skeleton_over_target=above["skeleton"],
           tracekit_over_skeleton=round(over_skeleton, 4),
           cpp_reads_cpu_ratio=round(cpp["cpu"], 4) if cpp else None, cpp_reads_cpu_ratios=cpp and cpp["cpu_ratios"],
           rounds_cpp_reads_over_target=above.get("cpp_reads"),
           plain_again_cpu_ratio=round(null["cpu"], 4), plain_again_cpu_ratios=null["cpu_ratios"])


# 2. trace build + DOT vs torchviz ---------------------------------------------------------------

def chain(n: int) -> torch.Tensor:
    x = torch.randn(8, requires_grad=True)
    v = x
    for _ in range(n):
        v = v * 1.0001
    return v.sum()


def bench_dot(quick: bool) -> None:
    """Trace + DOT of a chain against torchviz, and alone where torchviz cannot draw it; every timed
    call gets a graph built for it (untimed) that nothing has read yet, as a user's first trace of a
    graph: a graph read before (by the other side, an earlier run or the floor's reads) already has
    the Python objects of its nodes and saved tensors, and its trace is ~5 % cheaper at 100k nodes."""
    try:
        from torchviz import make_dot
    except ImportError:
        make_dot = None
    sizes = [400, 800, 4000, 20000, 100000] if not quick else [400, 800, 4000]
    tried, how = 0, ""  # the deepest chain torchviz was tried on, and how that went
    for n in sizes:
        source = ""

        def ours_once(y: torch.Tensor) -> None:
            nonlocal source
            source = quiet_trace(tk, y).draw().source

        theirs_status = "not installed" if make_dot is None else f"not tried; {how} at {tried} nodes"
        if make_dot is not None and n <= 4000:  # deeper: not tried (it recursed at 4000 nodes in every run so far)
            try:
                make_dot(chain(n), show_saved=True)
                theirs_status = "ok"
            except RecursionError:
                theirs_status = "RecursionError"
            tried, how = n, theirs_status
        if theirs_status == "ok":
            r = interleaved(lambda y: make_dot(y, show_saved=True).source, ours_once, 7 if n <= 800 else 3,
                            setup=lambda n=n: chain(n))
            target = "≤ 0.4×" if n == 800 else "-"
            record(f"trace+DOT / torchviz make_dot(show_saved=True), {n} nodes", r["wall"], target,
                   r["wall"] <= 0.4 if n == 800 else None, "×",
                   note=f"{r['ours_s'] * 1e3:.0f} ms vs {r['base_s'] * 1e3:.0f} ms",
                   tracekit_s=r["ours_s"], torchviz_s=r["base_s"], cpu_ratio=round(r["cpu"], 4), nodes=n,
                   dot_chars=len(source))
            continue
        # torchviz cannot draw it (or is not installed): each of three runs in a new process (_deep_run)
        runs = [_deep_run_in_new_process(n) for _ in range(3)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "dot_chars"}
        first, after = med["total_s"], med["after_freed_s"]
        measured = max(first, after)  # the worse: a process's first graph, or one after another was freed
        big = n >= 100000
        record(f"trace+DOT at {n} nodes (torchviz: {theirs_status})", measured, "≤ 1 s" if big else "-",
               measured <= 1 if big else None, "s",
               note=f"the worse of two medians of 3 new processes: the first graph {first:.2f} s (trace "
                    f"{med['trace_s']:.2f} s + DOT {med['dot_s']:.2f} s; CPU {med['trace_cpu_s']:.2f} s + "
                    f"{med['dot_cpu_s']:.2f} s; runs {_listed(runs, 'total_s')} s), a new "
                    f"graph after that one was freed {after:.2f} s (runs "
                    f"{_listed(runs, 'after_freed_s')} s); the reads alone (floor) CPU "
                    f"{med['reads_cpu_s']:.2f} s; the first graph gone {med['torn_down_s']:.2f} s after its output; "
                    f"the same graph traced again {med['traced_again_s']:.2f} s",
               **med, nodes=n, dot_chars=runs[0]["dot_chars"], runs_s=[round(r["total_s"], 4) for r in runs],
               traced_again_runs_s=[round(r["traced_again_s"], 4) for r in runs],
               after_freed_runs_s=[round(r["after_freed_s"], 4) for r in runs])


def _listed(runs: list[dict[str, float]], key: str) -> str:
    return ", ".join(f"{r[key]:.2f}" for r in runs)


def _deep_run_in_new_process(n: int) -> dict[str, float]:
    """_deep_run(n) in a new Python process (its figures, read from its last line)."""
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--deep-run", str(n)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode:
        raise RuntimeError(f"the {n}-node run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _deep_run(n: int) -> dict[str, float]:
    """One run of a deep row, in a process of its own: trace + DOT of a new chain of n nodes (a user's first
    trace of a graph), the two halves in wall clock and CPU time; then, on the same graph, the reads alone
    without a record (the floor under the trace half: read already, so a little low) and the trace + DOT
    again (what the row timed before 2026-12-05); how long the graph takes to go once its output does
    (a deep graph tracekit walked is let go by its keeper, in the background); and trace + DOT of a second
    new chain after that. A process of its own, so that both cases are measured as they are: a process's
    first graph, and one after a graph of the same size was freed, which pays for part of that freeing
    (glibc sorts the freed blocks when asked for a size it has none of: ~0.1 s at 100k nodes, on
    whatever allocation comes next); in one process every run but the first was the second case. The row
    gives the worse of the two. (The floor's reads run on the traced graph: a deep graph whose nodes have
    Python objects must be freed as the trace's keeper frees it, or freeing it recurses once per node.)"""
    y = chain(n)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    tr = quiet_trace(tk, y)
    t1, c1 = time.perf_counter(), time.process_time()
    source = tr.draw().source
    t2, c2 = time.perf_counter(), time.process_time()
    c_reads = time.process_time()
    bare_reads([y])
    c_reads = time.process_time() - c_reads
    t3 = time.perf_counter()
    quiet_trace(tk, y).draw()
    again = time.perf_counter() - t3
    del tr, y
    gone = _torn_down()
    y = chain(n)
    gc.collect()
    t4 = time.perf_counter()
    tr = quiet_trace(tk, y)
    tr.draw()
    after = time.perf_counter() - t4
    del tr, y
    _torn_down()
    return {"total_s": t2 - t0, "trace_s": t1 - t0, "dot_s": t2 - t1, "trace_cpu_s": c1 - c0, "dot_cpu_s": c2 - c1,
            "reads_cpu_s": c_reads, "torn_down_s": gone, "traced_again_s": again, "after_freed_s": after,
            "dot_chars": len(source)}


def _torn_down(limit: float = 10.0) -> float:
    """Seconds until the graph whose output just went is freed (a deep graph tracekit walked is let go by
    its keeper, in the background, a part at a time): waited for, so that the next run does not pay it."""
    from tracekit import keeper

    t0 = time.perf_counter()
    while keeper.pending() and time.perf_counter() - t0 < limit:
        time.sleep(0.005)
    return time.perf_counter() - t0


# 3. readable drawing at scale ---------------------------------------------------------------------

def bench_drawing(quick: bool) -> None:
    net = model(12)
    tr = tk.trace(net(torch.randn(2, 8, 32)).pow(2).mean())
    t0 = time.perf_counter()
    svg = tr.svg()
    seconds = time.perf_counter() - t0
    collapsed = "collapsed" in svg
    record(f"12-block model ({len(tr.nodes)} nodes) to SVG, collapsed", seconds, "< 5 s", seconds < 5 and collapsed,
           "s", renderer=renderer(), collapsed=collapsed)


# 4. memory truth ------------------------------------------------------------------------------------

def bench_memory(quick: bool) -> None:
    from tracekit import scenarios as sc

    worst = 0.0
    for fn, measured_key, predicted_key in (
        (sc.retain_graph, "freed_on_drop", "predicted"),
        (sc.storage_evidence, "slice_measured", "slice_predicted"),
        (sc.storage_evidence, "views_measured", "views_predicted"),
    ):
        r = fn("cpu")
        m, p = r.values[measured_key], r.values[predicted_key]
        worst = max(worst, abs(m - p) / max(p, 1))
    r = sc.recompute("cpu")
    plain = r.measurements["plain backward"]
    # the plain variant measures from its own start: activations are what forward left alive
    record("predicted vs measured saved bytes (worst rel. error)", worst * 100, "≤ 1 %", worst <= 0.01, "%",
           recompute_activations=r.values["activations"], recompute_plain_peak=plain.peak)


# 4b. tk.budget on deep models ----------------------------------------------------------------------

def _budget_setups(quick: bool):
    """(label, marks-per-step size, make): GPT-2 (transformers, 128 wide) by layers, and a Linear+GELU MLP."""
    def gpt2(layers: int):
        import transformers
        config = transformers.GPT2Config(n_layer=layers, n_embd=128, n_head=4, vocab_size=256, n_positions=64)
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config).train()
        ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
        opt = torch.optim.AdamW(model.parameters())

        def step() -> None:
            opt.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
        return model, opt, {"step": step}

    def deep_mlp(layers: int, device: str = "cpu"):
        torch.manual_seed(0)
        with torch.device(device):
            model = torch.nn.Sequential(*[m for _ in range(layers)
                                          for m in (torch.nn.Linear(32, 32), torch.nn.GELU())])
            batch = (torch.randn(8, 32), torch.randn(8, 32))
        return model, torch.optim.Adam(model.parameters()), {"batch": batch, "loss_fn": torch.nn.functional.mse_loss}

    try:
        import transformers  # noqa: F401
        have_hf = True
    except ImportError:
        have_hf = False
    sizes = (6, 12) if quick else (6, 12, 24)
    out = [(f"GPT-2 (transformers, width 128), {n} layers", n, lambda n=n: gpt2(n)) for n in sizes] if have_hf else []
    out += [(f"MLP Linear(32)+GELU, {n} layers", n, lambda n=n: deep_mlp(n))
            for n in ((250, 500) if quick else (250, 500, 1000))]
    return out + [(f"MLP on meta (predicted), {n} layers", n, lambda n=n: deep_mlp(n, "meta"))
                  for n in ((125, 250) if quick else (125, 250, 500))]


def bench_budget(quick: bool) -> None:
    """tk.budget's own time on deeper and deeper models: seconds, and per mark (a mark per reverse rule);
    the time per mark staying flat as the model deepens is what linear means."""
    per_mark: dict[str, float] = {}
    for label, _, make in _budget_setups(quick):
        model, opt, how = make()
        t0, c0 = time.perf_counter(), time.process_time()
        b = tk.budget(model, opt, **how)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        marks = len(b.timeline)
        family = label.split(",")[0]
        first = per_mark.setdefault(family, cpu / marks)
        record(f"tk.budget, {label}", seconds, "-", None, "s",
               note=f"CPU {cpu:.2f} s; {marks} marks, {cpu / marks * 1e6:.0f} µs per mark "
                    f"({cpu / marks / first:.2f}× the smallest's)", cpu_s=cpu, marks=marks)


# 5. the notebook suite -------------------------------------------------------------------------------

def bench_notebooks(quick: bool) -> None:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "notebooks"],
                          cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    lessons = len(list((ROOT / "notebooks").glob("[0-9]*.ipynb")))
    record(f"nbval over the {lessons} lessons", seconds, "< 180 s", done.returncode == 0 and seconds < 180, "s",
           passed=done.returncode == 0)


# 6. grading throughput --------------------------------------------------------------------------------

def _run_plainly(notebook: Path, folder: Path) -> float:
    """Seconds to run one notebook top to bottom with nbclient in a fresh kernel (no grading)."""
    import nbclient
    import nbformat

    book = nbformat.read(notebook, as_version=4)
    t0 = time.perf_counter()
    nbclient.NotebookClient(book, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return time.perf_counter() - t0


def _grade_one_student(subs: Path, out: Path, start: str) -> tuple[float, dict]:
    """Wall seconds of `tracekit grade --jobs 1` (sandboxes started `start`: warm or cold) and the report."""
    env = {**os.environ, "TRACEKIT_SANDBOX": start}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tracekit", "grade", str(subs), "--out", str(out), "--jobs", "1"],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"grading benchmark: tracekit grade failed: {done.stderr[-2000:]}")
    return wall, json.loads((out / "ann" / "report.json").read_text())


def bench_grading(quick: bool) -> None:
    """The reference solutions graded as one student (`tracekit grade --jobs 1`), warm and cold, as a
    ratio to running the same notebooks plainly with nbclient, in one run; per notebook: sandbox
    start, cells, measured workloads, probes, the reference's measurement and judging."""
    solutions = sorted((ROOT / "solutions").glob("ex*.ipynb"))[: 3 if quick else None]
    work = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    try:
        (work / "subs" / "ann").mkdir(parents=True)
        for path in solutions:
            shutil.copy(path, work / "subs" / "ann" / path.name)
        plain = sum(_run_plainly(path, work) for path in solutions)
        record(f"{len(solutions)} reference notebooks run plainly with nbclient", plain, "-", None, "s")
        for start in ("warm", "cold"):
            wall, report = _grade_one_student(work / "subs", work / f"out-{start}", start)
            full = report["score"] == report["max_score"]
            starts = sorted({p["sandbox"].get("start", "") for p in report["exercises"]})
            warm = start == "warm"
            record(f"tracekit grade, one student, {len(solutions)} notebooks, --jobs 1, {start}: ratio to nbclient",
                   wall / plain, "≤ 0.5" if warm else "-", (wall / plain <= 0.5) if warm else None,
                   "×", wall_s=round(wall, 2), plain_s=round(plain, 2), all_full_marks=full, sandbox_starts=starts,
                   per_notebook={p["exercise"]: {"seconds": p["sandbox"]["seconds"], **p["sandbox"].get("timing", {})}
                                 for p in report["exercises"]})
            for p in report["exercises"]:
                timing = p["sandbox"].get("timing", {})
                print(f"    {p['exercise']} {start}: " + ", ".join(f"{k} {v:.2f} s" for k, v in timing.items()))
            if not full:
                raise SystemExit(f"grading benchmark: the reference solutions did not get full marks ({start})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


BENCHES = {"capture": bench_capture, "floor": bench_floor, "phases": bench_phases, "dot": bench_dot,
           "drawing": bench_drawing, "memory": bench_memory, "budget": bench_budget, "notebooks": bench_notebooks,
           "grading": bench_grading}


def default_out(only: str, quick: bool) -> Path:
    """Where a run's results go without --out: results.json for everything at full size, else
    results-partial.json (a subset or --quick never replaces the full run)."""
    partial = quick or {name.strip() for name in only.split(",")} != set(BENCHES)
    return ROOT / "benchmarks" / ("results-partial.json" if partial else "results.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ", ".join(BENCHES))
    parser.add_argument("--out", help="where the results go (default: benchmarks/results.json for a full run; "
                                      "benchmarks/results-partial.json for --only or --quick, so that a partial "
                                      "run never replaces the full one)")
    parser.add_argument("--rounds", type=int, metavar="N",
                        help="rounds of the capture, floor and phases rows (more: a steadier median, noisy machine)")
    parser.add_argument("--deep-run", type=int, metavar="N", help=argparse.SUPPRESS)  # one deep run (bench_dot)
    args = parser.parse_args()
    if args.deep_run:
        print(json.dumps(_deep_run(args.deep_run)))
        return 0
    unknown = [name for name in args.only.split(",") if name.strip() not in BENCHES]
    if unknown:
        parser.error(f"--only: no benchmark named {', '.join(unknown)}; there are {', '.join(BENCHES)}")
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1")
    global ROUNDS
    ROUNDS = args.rounds
    if args.out is None:
        args.out = str(default_out(args.only, args.quick))
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():  # said now, not after minutes of measuring
        parser.error(f"--out {args.out}: give a file in a folder that exists, e.g. {out / 'results.json'}"
                     if out.is_dir() else f"--out {args.out}: the folder {out.parent} does not exist")
    os.environ.setdefault("MPLBACKEND", "Agg")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"load average at start: {load}; {os.cpu_count()} CPUs; torch {torch.__version__}"
          + (f"; {ROUNDS} rounds" if ROUNDS else ""))
    print(f"{'benchmark':72} {'measured':>9} {'':3} {'target':23} status")
    for name in args.only.split(","):
        BENCHES[name.strip()](args.quick)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"load average at end: {load_end}")
    summary = {"torch": torch.__version__, "cpus": os.cpu_count(), "quick": args.quick, "rounds": ROUNDS,
               "load_average": [load, load_end], "results": RESULTS}
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
