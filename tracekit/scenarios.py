"""Lifetime scenarios: small real PyTorch programs that tracekit runs, observes and explains.

Each scenario takes `device=` ("cpu" or "cuda") and returns a ScenarioResult; run one on
several devices side by side with `tk.compare(scenario, devices=("cpu", "cuda"))`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    noop_context_fn,
)

from .memory import Measurement, check_device, measure, synchronize
from .model import Status
from .record import capture, trace
from .results import ScenarioResult
from .storage import allocated_bytes, format_bytes, format_exact

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

N = 4096  # elements in the scenario tensors: 16 KiB of float32


def _error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """PyTorch's message if fn(*args, **kwargs) raises, else None."""
    try:
        fn(*args, **kwargs)
    except RuntimeError as err:
        return str(err)
    return None


def _predicted(storages: list[Any], device: str) -> int:
    return sum(allocated_bytes(s.nbytes, device) for s in storages)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach() - b.detach()).abs().max())


def _timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


# the programs the lessons show (each lesson's cell holds the same source) -------------------


def exp_times(a: torch.Tensor) -> torch.Tensor:
    """Lesson 4's program: y = sum(exp(a) * a)."""
    e = a.exp()  # exp's rule reads its output e
    return (e * a).sum()  # mul's rule reads e (for a's gradient) and a (for e's)


def overwrite_saved(a: torch.Tensor) -> torch.Tensor:
    """Lesson 5's bug: sin saves h, then h is overwritten in place."""
    h = a * 2
    y = h.sin()  # sin's rule needs the h of this moment: grad * cos(h)
    h.add_(1)  # the bug: overwrites the value sin saved
    return y.sum()


def block(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One layer of lessons 7 and 8: a matmul, then a pointwise activation."""
    return torch.tanh(h @ w)


def segment(h: torch.Tensor, *ws: torch.Tensor) -> torch.Tensor:
    """Several blocks in a row."""
    for w in ws:
        h = block(h, w)
    return h


def save_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    """Selective checkpointing policy: keep what matmuls produce, recompute the pointwise ops."""
    if op == torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def mlp_loss(x: torch.Tensor, ws: list[torch.Tensor], every: int = 0, policy: Any = None) -> torch.Tensor:
    """The blocks, checkpointed every `every` blocks (0: not at all), selectively if a policy is given."""
    h, step = x, every or len(ws)
    for i in range(0, len(ws), step):
        if not every:
            h = segment(h, *ws[i:i + step])
            continue
        ctx = partial(create_selective_checkpoint_contexts, policy) if policy else noop_context_fn
        h = checkpoint(segment, h, *ws[i:i + step], use_reentrant=False, context_fn=ctx)
    return h.pow(2).mean()


def train_and_log(model: Any, opt: Any, x: Any, x_val: Any, keep: Any, probe: Any, steps: int = 6) -> list:
    """Lesson 6's loop: train, and log a diagnostic each step, kept as keep(val)."""
    history = []
    for i in range(steps):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        val = model(x_val).pow(2).mean()  # a diagnostic, computed with grad enabled
        history.append(keep(val))
        del loss, val
        probe.mark(f"iteration {i}")
    return history


# 1. repeated backward ------------------------------------------------------------------


def repeated_backward(device: str = "cpu") -> ScenarioResult:
    """Backward twice without retention fails; a graph whose rules saved nothing does not."""
    dev = check_device(device)
    a = torch.linspace(-1, 1, N, device=dev, requires_grad=True)
    with capture() as cap:
        y = exp_times(a)
    tr = cap.trace(y)
    tr.backward()
    error = _error(lambda: y.backward())
    released = [r for r in tr.residuals if r.released_at is not None]
    failing = next(s for s in tr.steps if any(r in released for r in s.used))

    b = torch.zeros(N, device=dev, requires_grad=True)
    y2 = (a.detach() + b).sum()
    tr2 = trace(y2)
    y2.backward()
    again = _error(lambda: y2.backward())
    facts = {
        "program": "y = (a.exp() * a).sum(); y.backward(); y.backward()",
        "second backward": f"RuntimeError: {error}",
        "released before it": "; ".join(f"{r.label} after step {r.released_at}" for r in released),
        "first rule to need one": f"step {failing.index}: {failing.node.name} reads "
        f"{', '.join(r.slot for r in failing.used)}",
        "graph whose rules saved nothing": f"y2 = (a.detach() + b).sum(): {len(tr2.residuals)} residuals",
        "its second backward": ("ok" if again is None else f"RuntimeError: {again}")
        + " (an implementation detail of torch 2.13, not the documented contract: use retain_graph=True)",
        "b.grad after two backwards": f"{b.grad.unique().tolist()} (1 per backward, accumulated)",
    }
    return ScenarioResult(
        "repeated_backward", str(dev), facts, error=error,
        values={"released": [(r.label, r.released_at) for r in released], "failing_step": failing.index,
                "no_residual_count": len(tr2.residuals), "second_ok": again is None,
                "b_grad": b.grad.unique().tolist()},
        traces={"y": tr, "y2": tr2},
    )


# 2. retain_graph ---------------------------------------------------------------------------


def retain_graph(device: str = "cpu") -> ScenarioResult:
    """retain_graph=True keeps every residual until the graph is dropped; measured."""
    dev = check_device(device)
    a = torch.linspace(-1, 1, N, device=dev, requires_grad=True)
    with measure(dev) as probe:
        y = exp_times(a)
        probe.mark("after forward")
        tr = trace(y)
        tr.backward(retain_graph=True)
        first = a.grad.clone()
        probe.mark("after backward (retained)")
        second_error = _error(y.backward, retain_graph=True)
        probe.mark("after second backward")
        predicted = _predicted(tr.graph_owned_storages(), str(dev)) + allocated_bytes(y.nbytes, str(dev))
        live_residuals = sum(r.status is Status.LIVE for r in tr.residuals)
        del tr, y
        probe.mark("after dropping the graph")
    m = probe.result
    freed = m.marks["after second backward"] - m.marks["after dropping the graph"]
    facts = {
        "program": "y = (a.exp() * a).sum(); y.backward(retain_graph=True) twice; del y",
        "second backward": "ok" if second_error is None else f"RuntimeError: {second_error}",
        "a.grad after both": "2 × the first gradient" if torch.equal(a.grad, 2 * first) else "different",
        "residuals still live after both backwards": str(live_residuals),
        "freed when the graph is dropped (measured)": format_exact(freed),
        "predicted from residual storages + output": format_exact(predicted),
        "measured by": m.source,
    }
    return ScenarioResult(
        "retain_graph", str(dev), facts,
        values={"freed_on_drop": freed, "predicted": predicted, "live_residuals": live_residuals,
                "second_ok": second_error is None, "grad_doubled": torch.equal(a.grad, 2 * first)},
        measurements={"retain": m},
    )


# 3. create_graph ------------------------------------------------------------------------------


def create_graph(device: str = "cpu") -> ScenarioResult:
    """create_graph records a differentiable graph of the derivative; retain_graph does not."""
    dev = check_device(device)
    x = torch.linspace(-2, 2, N, device=dev, requires_grad=True)
    y = (x.sin() * x).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)  # g = sin x + x cos x
    tr_g = trace(g.sum())
    (h,) = torch.autograd.grad(g.sum(), x)  # h = 2 cos x - x sin x
    xd = x.detach()
    err_g = _max_diff(g, xd.sin() + xd * xd.cos())
    err_h = _max_diff(h, 2 * xd.cos() - xd * xd.sin())

    y2 = (x.sin() * x).sum()
    (g2,) = torch.autograd.grad(y2, x, retain_graph=True)
    tr_y2 = trace(y2)
    facts = {
        "program": "g = grad(y, x, create_graph=True); h = grad(g.sum(), x)",
        "derivative g has a graph": f"yes: {len(tr_g.nodes)} nodes, {len(tr_g.residuals)} residuals, "
        f"{format_bytes(tr_g.saved_bytes)} pinned",
        "g vs sin x + x cos x": f"max |diff| = {err_g:.2e}",
        "second derivative h vs 2 cos x − x sin x": f"max |diff| = {err_h:.2e}",
        "with retain_graph=True instead": f"g has no graph (requires_grad={g2.requires_grad}); the original "
        f"graph keeps its {sum(r.status == 'live' for r in tr_y2.residuals)} residuals, "
        f"but nothing recorded how g was computed",
    }
    return ScenarioResult(
        "create_graph", str(dev), facts,
        values={"g_nodes": len(tr_g.nodes), "g_residuals": len(tr_g.residuals), "err_g": err_g, "err_h": err_h,
                "retain_requires_grad": g2.requires_grad,
                "retained_live": sum(r.status is Status.LIVE for r in tr_y2.residuals)},
        traces={"g": tr_g, "y_retained": tr_y2},
    )


# 4. in-place mutation ------------------------------------------------------------------------


def _reference_grad(a: torch.Tensor) -> torch.Tensor:
    return 2 * torch.cos(2 * a.detach())  # d/da sum(sin(2a))


def _fix_out_of_place(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = a * 2
    y = h.sin()
    h_next = h + 1  # a new tensor: the saved h keeps its value
    y.sum().backward()
    return a.grad, h_next


def _fix_clone(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = a * 2
    y = h.sin()
    h_next = h.clone()
    h_next.add_(1)  # mutate a copy
    y.sum().backward()
    return a.grad, h_next


def _fix_reorder(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = a * 2
    y = h.sin()
    y.sum().backward()  # the rule that needs h runs first ...
    h_next = h.detach().add_(1)  # ... then the update (as an optimizer step would)
    return a.grad, h_next


def _no_grad_add(t: torch.Tensor) -> None:
    with torch.no_grad():
        t.add_(0)


def inplace(device: str = "cpu") -> ScenarioResult:
    """A saved value modified in place: PyTorch's version-counter error, explained, then fixed."""
    dev = check_device(device)
    base = torch.linspace(-1, 1, 8, device=dev)
    a = base.clone().requires_grad_(True)
    with capture() as cap:
        y = overwrite_saved(a)
    tr = cap.trace(y)
    residual = next(r for r in tr.residuals if r.status is Status.MODIFIED)
    error = _error(lambda: y.backward())

    fixes = {}
    for name, fix in (("out-of-place (h + 1)", _fix_out_of_place), ("clone before mutating", _fix_clone),
                      ("reorder (backward, then mutate)", _fix_reorder)):
        leaf = base.clone().requires_grad_(True)
        grad, h_next = fix(leaf)
        fixes[name] = (_max_diff(grad, _reference_grad(leaf)), torch.equal(h_next, 2 * base + 1))

    # the version counter counts writes, not changes: a write that restores the value still counts
    b = base.clone().requires_grad_(True)
    hb = b * 2
    yb = hb.sin()
    before = hb.detach().clone()
    hb.mul_(2)
    hb.div_(2)  # exact in float32 for these values: the saved value is unchanged
    restored = torch.equal(hb, before)
    restored_error = _error(lambda: yb.sum().backward())

    # an overwrite that still prints a plausible number: clamp (an in-place ReLU) on the saved h
    c = base.clone().requires_grad_(True)
    hc = c * 2
    yc = hc.sin()
    hc.clamp_(min=0)
    clamp_error = _error(lambda: yc.sum().backward())

    # .data writes without bumping the version: no error, and a silently wrong gradient
    d = base.clone().requires_grad_(True)
    hd = d * 2
    yd = hd.sin()
    hd.data.clamp_(min=0)
    yd.sum().backward()
    data_diff = _max_diff(d.grad, _reference_grad(d))
    used_new = _max_diff(d.grad, 2 * torch.cos(hd.detach()))

    # views, .detach() and writes under no_grad share / bump the same counter
    shared = {}
    for name, write in (("a view: h[:2].add_(0)", lambda t: t[:2].add_(0)),
                        ("h.detach().add_(0)", lambda t: t.detach().add_(0)),
                        ("under torch.no_grad(): h.add_(0)", lambda t: _no_grad_add(t))):
        t = base.clone().requires_grad_(True) * 2
        v0 = t._version
        write(t)
        shared[name] = t._version - v0

    facts = {
        "program": "h = a * 2; y = h.sin(); h.add_(1); y.sum().backward()",
        "backward": f"RuntimeError: {error}",
        "residual": f"{residual.label} ({residual.role})",
        "version when saved / now": f"{residual.saved_version} / {residual.version}",
        "bumped by": ", ".join(str(m) for m in residual.modified_by),
    }
    for name, (diff, ok) in fixes.items():
        h_next = "ok" if ok else "WRONG"
        facts[f"fix: {name}"] = f"backward ok, grad max |diff| vs 2cos(2a) = {diff:.1e}, h_next {h_next}"
    facts["h.mul_(2); h.div_(2): same value, two writes"] = (
        f"torch.equal(h, before) = {restored}, yet backward raises (the counter counts writes, not changes): "
        f"{(restored_error or 'nothing').split(';')[0].split(': ')[-1]}"
    )
    facts["h.clamp_(min=0): plausible numbers, saved value lost"] = (
        f"backward raises: {(clamp_error or 'nothing').split(';')[0].split(': ')[-1]}"
    )
    facts["h.data.clamp_(min=0): no version bump"] = (
        f"backward runs; grad max |diff| vs 2cos(2a) = {data_diff:.2f} (it used the clamped h: "
        f"max |diff| vs 2cos(h now) = {used_new:.1e})"
    )
    for name, bump in shared.items():
        facts[f"version bump from {name}"] = f"+{bump}"
    return ScenarioResult(
        "inplace", str(dev), facts, error=error,
        values={"slot": residual.slot, "node": residual.node.name, "saved_version": residual.saved_version,
                "version": residual.version, "bumped_by": [m.call for m in residual.modified_by],
                "fixes": fixes, "restored": restored, "restored_error": restored_error,
                "clamp_error": clamp_error, "data_diff": data_diff, "data_used_new": used_new, "shared": shared},
        traces={"buggy": tr},
    )


# 5. recompute ---------------------------------------------------------------------------------

WIDTH, DEPTH, BATCH, SEGMENT = 256, 8, 512, 4  # activations (512×256 floats = 512 KiB each) dominate


def _mlp(dev: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, WIDTH, generator=gen).to(dev)
    scale = WIDTH**0.5
    ws = [(torch.randn(WIDTH, WIDTH, generator=gen) / scale).to(dev).requires_grad_(True) for _ in range(DEPTH)]
    return x, ws


MODEL = f"{DEPTH} × tanh(h @ W), W {WIDTH}×{WIDTH}, batch {BATCH}"


def _grads(ws: list[torch.Tensor]) -> list[torch.Tensor]:
    out = [w.grad.clone() for w in ws]
    for w in ws:
        w.grad = None
    return out


def _recompute_variants(x: torch.Tensor, ws: list[torch.Tensor]) -> dict[str, Callable[[], list[torch.Tensor]]]:
    def plain() -> list[torch.Tensor]:
        mlp_loss(x, ws).backward()
        return _grads(ws)

    def retained() -> list[torch.Tensor]:
        loss = mlp_loss(x, ws)
        loss.backward(retain_graph=True)
        _grads(ws)
        loss.backward()  # the second pass reuses every saved activation
        return _grads(ws)

    def recomputed() -> list[torch.Tensor]:
        mlp_loss(x, ws).backward()
        _grads(ws)
        mlp_loss(x, ws).backward()  # a fresh forward instead of a kept graph
        return _grads(ws)

    def checkpointed() -> list[torch.Tensor]:
        mlp_loss(x, ws, every=SEGMENT).backward()
        return _grads(ws)

    def selective() -> list[torch.Tensor]:
        mlp_loss(x, ws, every=SEGMENT, policy=save_matmuls).backward()
        return _grads(ws)

    return {"plain backward": plain, "retain_graph + second backward": retained,
            "recomputed forward + second backward": recomputed,
            f"checkpoint every {SEGMENT} blocks (use_reentrant=False)": checkpointed,
            f"selective checkpoint every {SEGMENT} blocks (save matmuls)": selective}


def recompute(device: str = "cpu") -> ScenarioResult:
    """Plain, retained, recomputed and checkpointed backward: equal gradients, measured peak and time."""
    dev = check_device(device)
    x, ws = _mlp(dev)
    loss = mlp_loss(x, ws)
    tr = trace(loss)
    activations = _predicted(tr.graph_owned_storages(), str(dev))
    del tr, loss
    variants = _recompute_variants(x, ws)
    reference = None
    rows: dict[str, dict[str, Any]] = {}
    measurements = {}
    for name, run in variants.items():
        run()  # warm-up: first-call allocations and kernel selection are not part of the story
        with measure(dev) as probe:
            grads = run()
        _, seconds = _timed(run, str(dev))  # timed without the profiler
        reference = grads if reference is None else reference
        diff = max(_max_diff(g, r) for g, r in zip(grads, reference))
        measurements[name] = probe.result
        rows[name] = {"peak": probe.result.peak, "seconds": seconds, "max_diff": diff}
    base = rows["plain backward"]
    facts = {"model": MODEL, "saved activations (trace)": format_bytes(activations)}
    for name, r in rows.items():
        facts[name] = (f"peak {format_bytes(r['peak'])} ({r['peak'] / base['peak']:.2f}×), "
                       f"time {r['seconds'] * 1e3:.1f} ms ({r['seconds'] / base['seconds']:.2f}×), "
                       f"grad max |diff| {r['max_diff']:.1e}")
    from .render.figures import recompute_figure

    return ScenarioResult("recompute", str(dev), facts, values={"rows": rows, "activations": activations},
                          measurements=measurements, plot=recompute_figure)


# 6. saved-tensor hooks and offload -------------------------------------------------------------------


def offload(device: str = "cpu") -> ScenarioResult:
    """Where residuals live under saved-tensor hooks and save_on_cpu, and what moving them costs."""
    dev = check_device(device)
    x, ws = _mlp(dev)
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

    import contextlib

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
        grads = _grads(ws)
        reference = grads if reference is None else reference
        host_measured = host_probe.result.marks.get("after forward") if on_gpu and host_probe.result else None
        rows[name] = {
            "device_bytes": probe.result.marks["after forward"],
            "host_bytes_trace": by_device.get("cpu", 0) if on_gpu else None,
            "host_bytes_measured": host_measured,
            "graph_bytes": same_storage,
            "pack_s": transfer["pack"], "unpack_s": transfer["unpack"],
            "max_diff": max(_max_diff(g, r) for g, r in zip(grads, reference)),
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
    from .render.figures import offload_figure

    return ScenarioResult("offload", str(dev), facts, values={"rows": rows}, plot=offload_figure)


# 7. application references ---------------------------------------------------------------------------

ITERATIONS = 6


def training_setup(device: str = "cpu") -> tuple[Any, Any, torch.Tensor, torch.Tensor]:
    """Lesson 6's model (128-128-1 MLP, fixed seed), its SGD optimizer, a batch and a validation batch."""
    dev = check_device(device)
    gen = torch.Generator().manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 128, generator=gen).to(dev)
    x_val = torch.randn(256, 128, generator=gen).to(dev)
    return model, opt, x, x_val


KEEPS: dict[str, Callable[[torch.Tensor], Any]] = {
    "graph": lambda val: val, "detach": lambda val: val.detach(), "item": lambda val: val.item(),
}


def _train(dev: torch.device, keep: str) -> tuple[Measurement, list[torch.Tensor], list[Any]]:
    model, opt, x, x_val = training_setup(str(dev))
    with measure(dev) as probe:
        history = train_and_log(model, opt, x, x_val, KEEPS[keep], probe, steps=ITERATIONS)
    return probe.result, [p.detach().clone() for p in model.parameters()], history


def app_references(device: str = "cpu") -> ScenarioResult:
    """Keeping a diagnostic with its graph keeps every iteration's graph alive; .item() / .detach() do not."""
    dev = check_device(device)
    rows = {}
    params = {}
    measurements = {}
    for keep, label in (("graph", "history.append(val)"), ("detach", "history.append(val.detach())"),
                        ("item", "history.append(val.item())")):
        m, final, _ = _train(dev, keep)
        live = [m.marks[f"iteration {i}"] for i in range(ITERATIONS)]
        rows[label] = {"live": live, "growth": (live[-1] - live[0]) / (ITERATIONS - 1)}
        params[label] = final
        measurements[label] = m
    ref = params["history.append(val.item())"]
    facts = {"loop": f"{ITERATIONS} SGD steps of a 128-128-1 MLP; each logs val = model(x_val).pow(2).mean()"}
    for label, r in rows.items():
        same = all(torch.equal(a, b) for a, b in zip(params[label], ref))
        facts[label] = (f"live bytes grow {format_bytes(int(r['growth']))} per iteration "
                        f"({format_bytes(r['live'][0])} → {format_bytes(r['live'][-1])}); "
                        f"trained parameters {'identical' if same else 'DIFFERENT'}")
    from .render.figures import references_figure

    return ScenarioResult("app_references", str(dev), facts, values={"rows": rows},
                          measurements=measurements, plot=references_figure)


# 8. storage evidence ---------------------------------------------------------------------------------


def _slice_of_big(w: torch.Tensor) -> torch.Tensor:
    big = torch.randn(1024, 1024, device=w.device)  # 4 MiB, reachable afterwards only through the graph
    piece = big[0, :5]  # a 20-byte view
    return (piece * w).sum()  # mul saves `piece` for w's gradient


def _shared_views(a: torch.Tensor) -> torch.Tensor:
    h = a * 2  # one allocation ...
    half = h.shape[0] // 2
    return (h[:half] * h[half:]).sum() + (h[::2] * h[1::2]).sum()  # ... saved as four views


def storage_evidence(device: str = "cpu") -> ScenarioResult:
    """A small slice pinning a large allocation; several saved views sharing one; shapes vs storage vs measured."""
    dev = check_device(device)
    d = str(dev)
    w = torch.ones(5, device=dev, requires_grad=True)
    with measure(dev) as probe:
        y = _slice_of_big(w)
        probe.mark("slice: after forward")
        tr_slice = trace(y)
        slice_predicted = _predicted(tr_slice.graph_owned_storages(), d) + allocated_bytes(y.nbytes, d)
        del y
        probe.mark("slice: graph dropped")
    m_slice = probe.result
    a = torch.randn(N, device=dev, requires_grad=True)
    with measure(dev) as probe:
        z = _shared_views(a)
        probe.mark("views: after forward")
        tr_views = trace(z)
        views_predicted = _predicted(tr_views.graph_owned_storages(), d) + allocated_bytes(z.nbytes, d)
    m_views = probe.result
    slice_res = next(r for r in tr_slice.residuals if r.shape == (5,))
    h_views = [r for r in tr_views.residuals if r.storage is not None and r.storage.nbytes == N * 4]
    values = {
        "slice_visible": slice_res.nbytes, "slice_pinned": slice_res.pinned_nbytes,
        "slice_measured": m_slice.marks["slice: after forward"], "slice_predicted": slice_predicted,
        "views_count": len(h_views), "views_storages": len({id(r.storage) for r in h_views}),
        "views_naive": tr_views.visible_bytes, "views_storage_truth": tr_views.saved_bytes,
        "views_measured": m_views.marks["views: after forward"], "views_predicted": views_predicted,
    }
    facts = {
        "slice": "big = randn(1024, 1024); piece = big[0, :5]; y = (piece * w).sum()",
        "slice residual": f"{slice_res.label}: visible {format_bytes(slice_res.nbytes)} / "
        f"pinned {format_bytes(slice_res.pinned_nbytes)}",
        "slice: measured after forward": f"{format_exact(values['slice_measured'])}, "
        f"predicted {format_exact(slice_predicted)}",
        "views": "h = a * 2; (h[:n/2] * h[n/2:]).sum() + (h[::2] * h[1::2]).sum()",
        "views saved": f"{values['views_count']} residual views of {values['views_storages']} allocation",
        "views: naive sum of shapes": format_exact(values["views_naive"]),
        "views: storage truth": format_exact(values["views_storage_truth"]),
        "views: measured after forward": f"{format_exact(values['views_measured'])}, "
        f"predicted {format_exact(views_predicted)} (graph-only storages + output)",
        "measured by": m_views.source,
    }
    from .render.figures import storage_figure

    return ScenarioResult("storage_evidence", d, facts, values=values,
                          traces={"slice": tr_slice, "views": tr_views},
                          measurements={"slice": m_slice, "views": m_views}, plot=storage_figure)


SCENARIOS = (
    repeated_backward, retain_graph, create_graph, inplace, recompute, offload, app_references, storage_evidence,
)
