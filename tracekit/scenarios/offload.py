"""Scenario 6: where residuals live under saved-tensor hooks and save_on_cpu, and what moving them costs."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from ..capture import trace
from ..memory import check_device, measure, synchronize
from ..render.figures import KIB, figure_and_axes
from ..results import ScenarioResult
from ..storage import format_bytes
from .common import max_diff, take_grads
from .programs import MODEL, mlp_inputs, mlp_loss

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def offload(device: str = "cpu") -> ScenarioResult:
    """Where residuals live under saved-tensor hooks and save_on_cpu, and what moving them costs."""
    dev = check_device(device)
    x, ws = mlp_inputs(dev)
    on_gpu = dev.type == "cuda"
    transfer = {"pack": 0.0, "unpack": 0.0}

    def pack(t: torch.Tensor) -> Any:
        if t.is_leaf and t.requires_grad:
            return t  # a parameter: it lives on the device anyway, copying it would only add bytes
        synchronize(t.device)
        t0 = time.perf_counter()
        host = t.detach().to("cpu", copy=True)
        synchronize(t.device)
        transfer["pack"] += time.perf_counter() - t0
        return t.device, host

    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        device_, host = packed
        t0 = time.perf_counter()
        out = host.to(device_, non_blocking=False)
        synchronize(device_)
        transfer["unpack"] += time.perf_counter() - t0
        return out

    variants = {
        "no hooks": contextlib.nullcontext,
        "custom pack/unpack (activations to host)": lambda: torch.autograd.graph.saved_tensors_hooks(pack, unpack),
        "save_on_cpu": lambda: torch.autograd.graph.save_on_cpu(pin_memory=on_gpu),
    }
    rows: dict[str, dict[str, Any]] = {}
    reference = None
    for name, hooks in variants.items():
        for w in ws:
            w.grad = None
        transfer.update(pack=0.0, unpack=0.0)
        with measure(dev) as probe, (measure("cpu") if on_gpu else contextlib.nullcontext()) as host_probe:
            with hooks():
                loss = mlp_loss(x, ws)
            probe.mark("after forward")
            tr = trace(loss)
            by_device = tr.saved_bytes_by_device
            same_storage = sum(s.nbytes for s in tr.graph_owned_storages())
            del tr
            loss.backward()
        grads = take_grads(ws)
        reference = grads if reference is None else reference
        host_measured = host_probe.result.marks.get("after forward") if on_gpu and host_probe.result else None
        rows[name] = {
            "device_bytes": probe.result.marks["after forward"],
            "host_bytes_trace": by_device.get("cpu", 0) if on_gpu else None,
            "host_bytes_measured": host_measured,
            "graph_bytes": same_storage,
            "pack_s": transfer["pack"], "unpack_s": transfer["unpack"],
            "max_diff": max(max_diff(g, r) for g, r in zip(grads, reference)),
        }
    facts = {"model": MODEL}
    for name, r in rows.items():
        where = (f"{str(dev)} {format_bytes(r['device_bytes'])}, host {format_bytes(r['host_bytes_trace'])}"
                 if on_gpu else f"cpu {format_bytes(r['device_bytes'])} (device and host are the same memory)")
        moved = f", pack {r['pack_s'] * 1e3:.2f} ms, unpack {r['unpack_s'] * 1e3:.2f} ms" if r["pack_s"] else ""
        facts[name] = f"after forward: {where}{moved}, grad max |diff| {r['max_diff']:.1e}"
    facts["note"] = ("pack runs once per save: an activation saved by two rules (tanh's output is also "
                     "the next matmul's input) is packed, and copied, twice")
    if not on_gpu:
        facts["on a CPU-only machine"] = (
            "save_on_cpu copies nothing (the residuals already live in host memory); the graph holds "
            f"{format_bytes(rows['save_on_cpu']['graph_bytes'])} either way "
            f"(no hooks: {format_bytes(rows['no hooks']['graph_bytes'])})"
        )
    return ScenarioResult("offload", str(dev), facts, values={"rows": rows}, plot=offload_figure)


def offload_figure(result: ScenarioResult) -> Any:
    """Bytes the graph keeps on the device after forward, per hook setting."""
    rows = result.values["rows"]
    names = list(rows)
    fig, ax = figure_and_axes()
    ax.barh(names, [rows[n]["device_bytes"] / KIB for n in names], label=f"{result.device} (measured)")
    if result.device.startswith("cuda"):
        ax.barh(names, [(rows[n]["host_bytes_trace"] or 0) / KIB for n in names], left=[rows[n]["device_bytes"] / KIB
                for n in names], label="host (trace)")
    ax.set_xlabel("KiB held after forward")
    ax.set_title(f"saved-tensor hooks on {result.device}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
