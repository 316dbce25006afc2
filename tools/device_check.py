"""The trace on CUDA beside the same trace on CPU: what a GPU machine must confirm that CI (no GPU)
cannot. Prints one line per check and exits non-zero if any fails.

    PYTHONPATH=. python tools/device_check.py            # needs torch with CUDA

Checks, each on an MLP (width 64, batch 32) and the scalar tanh recurrence of benchmarks/run.py:
- gradients under capture + trace + observed backward are bitwise equal to a plain backward's;
- the record on CUDA says what it says on CPU (nodes, residual slots, roles, shapes, dtypes, bytes,
  storages, observed release and free steps), device text aside;
- the capture rows' time ratio on CUDA (informative: the targets of issue 37 are CPU time).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import run as bench  # noqa: E402 - the benchmark's own programs

import tracekit as tk  # noqa: E402

FAILED: list[str] = []


def check(what: str, ok: bool, detail: str = "") -> None:
    """One line: ok or FAIL, what was checked, and what was seen."""
    print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        FAILED.append(what)


def programs(device: str) -> dict[str, tuple[list[torch.Tensor], object]]:
    """name -> (the leaves whose gradients are compared, a forward returning the loss), seeded."""
    torch.manual_seed(0)
    net = bench.mlp(64).to(device)
    xx = torch.randn(32, 64, device=device)
    x, w, b = (torch.tensor(v, requires_grad=True, device=device) for v in (0.5, 0.9, 0.1))
    return {"mlp64": (list(net.parameters()), lambda: net(xx).pow(2).mean()),
            "scalar": ([x, w, b], lambda: bench.scalar_program(x, w, b, steps=200))}


def facts(tr: tk.Trace) -> dict[str, object]:
    """What the trace says, with device text and addresses left out (they differ by device)."""
    return {
        "nodes": [(n.name, n.op, n.input_nodes, n.input_leaves) for n in tr.nodes],
        "residuals": [(r.slot, r.role, r.shape, r.dtype, r.nbytes, r.rule, r.producer, r.preview, r.released_at,
                       r.freed_at, r.held_by) for r in tr.residuals],
        "storages": [(s.nbytes, s.is_parameter, s.is_output, len(s.residuals)) for s in tr.storages],
        "order": list(tr.lifetimes().order),
    }


def traced(leaves: list[torch.Tensor], forward) -> tuple[tk.Trace, list[torch.Tensor]]:
    """capture + trace + observed backward; the gradients it left."""
    for p in leaves:
        p.grad = None
    with tk.capture() as cap:
        y = forward()
    tr = cap.trace(y, progress=False)
    tr.backward()
    return tr, [p.grad.clone() for p in leaves]


def plain(leaves: list[torch.Tensor], forward) -> list[torch.Tensor]:
    """A plain backward's gradients."""
    for p in leaves:
        p.grad = None
    forward().backward()
    return [p.grad.clone() for p in leaves]


def ratio(leaves: list[torch.Tensor], forward, device: str, repeat: int = 7) -> tuple[float, float]:
    """Median wall seconds of plain and of traced forward + backward, interleaved (synchronized)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {"plain": [], "traced": []}
    for _ in range(repeat):
        for kind, run in (("plain", lambda: plain(leaves, forward)), ("traced", lambda: traced(leaves, forward))):
            sync()
            start = time.perf_counter()
            run()
            sync()
            times[kind].append(time.perf_counter() - start)
    return statistics.median(times["plain"]), statistics.median(times["traced"])


def main() -> int:
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}", flush=True)
    if not torch.cuda.is_available():
        print("FAIL no CUDA device: nothing checked")
        return 1
    seen: dict[str, dict[str, object]] = {}
    for device in ("cpu", "cuda"):
        for name, (leaves, forward) in programs(device).items():
            forward().backward()  # warm up (CUDA context, kernels)
            tr, grads = traced(leaves, forward)
            expected = plain(leaves, forward)
            same = all(torch.equal(g, e) for g, e in zip(grads, expected))
            check(f"{name} on {device}: gradients bitwise equal to a plain backward", same)
            # a Python number in an op (0.1 * h) is a 0-dim CPU tensor whatever the device: PyTorch's own rule
            devices = {r.device for r in tr.residuals if r.device and r.shape}
            numbers = sum(1 for r in tr.residuals if r.device == "cpu" and r.shape == ())
            check(f"{name} on {device}: every residual with dimensions on {device}",
                  all(d.startswith(device) for d in devices), f"{sorted(devices)}; 0-dim on cpu: {numbers}")
            seen[f"{name}/{device}"] = facts(tr)
            json.loads(tr.to_json())  # the JSON of a CUDA trace reads back
    for name in ("mlp64", "scalar"):
        cpu, cuda = seen[f"{name}/cpu"], seen[f"{name}/cuda"]
        for part in cpu:
            differ = [i for i, (a, b) in enumerate(zip(cpu[part], cuda[part])) if a != b]
            same = not differ and len(cpu[part]) == len(cuda[part])
            if same:
                detail = f"{len(cpu[part])} rows"
            elif differ:
                detail = f"row {differ[0]}: {cpu[part][differ[0]]} vs {cuda[part][differ[0]]}"
            else:
                detail = f"{len(cpu[part])} rows vs {len(cuda[part])}"
            check(f"{name}: {part} on CUDA as on CPU", same, detail)
    for name, (leaves, forward) in programs("cuda").items():
        p, t = ratio(leaves, forward, "cuda")
        print(f"info {name} on CUDA: plain {p * 1e3:.1f} ms, traced {t * 1e3:.1f} ms, {t / p:.2f}x (wall)", flush=True)
    print(f"{'all checks hold' if not FAILED else f'{len(FAILED)} failed'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
