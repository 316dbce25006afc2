"""The floor with the reads in C++ (cpp_reads.cpp): run.py's bare_reads made by one C++ call per graph,
the saved tensors read through compiled autograd's collector. Benchmarks only: tracekit stays Python.

    python benchmarks/cpp_reads.py      # compile (once; ~15 s) and print what it reads of a small graph

It needs a C++ compiler and ninja (`pip install ninja` or the system's); `reader()` says why not
where it cannot compile, and run.py then leaves its rows out.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent


@functools.cache
def reader() -> Any:
    """The compiled module (its `read_graph(outputs)`), or the reason it could not be built (a str)."""
    try:
        from torch.utils.cpp_extension import load

        folder = Path(os.environ.get("TRACEKIT_CPP_BUILD", Path.home() / ".cache" / "tracekit-bench-cpp"))
        folder = folder / torch.__version__.replace("+", "_")
        folder.mkdir(parents=True, exist_ok=True)
        return load("tracekit_bench_reads", [str(HERE / "cpp_reads.cpp")], build_directory=str(folder),
                    extra_cflags=["-O2"], verbose=False)
    except Exception as error:  # no compiler, no ninja, headers this torch does not ship: no C++ row
        return f"{type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}"


def cpp_reads(outputs: list[torch.Tensor]) -> tuple[list[tuple], dict]:
    """bare_reads with the reads in C++: (the saved tensors' rows, the hook dict registered on every node
    as the build registers it: that walk stays in Python, as tracekit's would). Each storage's weak
    reference is dropped here, as bare_reads drops its own."""
    from tracekit.internals import shared_hook_dict
    from tracekit.keeper import gc_paused
    from tracekit.live import forward_order, walk
    from tracekit.storage import drop_weak_ref

    module = reader()
    if isinstance(module, str):
        raise RuntimeError(f"the C++ reader could not be built: {module}")
    with gc_paused():
        _, saved, storages = module.read_graph(list(outputs))
        for _, _, ref, _ in storages:
            drop_weak_ref(ref)
        return saved, shared_hook_dict(forward_order(walk([t.grad_fn for t in outputs])))


if __name__ == "__main__":
    module = reader()
    if isinstance(module, str):
        raise SystemExit(f"could not build: {module}")
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).exp().sum()
    nodes, saved, storages = module.read_graph([y])
    print("nodes:", nodes)
    print("saved:", saved)
    print("storages:", storages)
    from tracekit.storage import drop_weak_ref

    for _, _, ref, _ in storages:
        drop_weak_ref(ref)
