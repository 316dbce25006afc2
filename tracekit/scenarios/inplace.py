"""Scenario 4: a saved value modified in place: PyTorch's version-counter error, explained, then fixed."""

from __future__ import annotations

import torch

from ..capture import capture
from ..internals import version
from ..memory import check_device
from ..results import ScenarioResult
from ..rows import Status
from .common import error_of, max_diff

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines


def overwrite_saved(a: torch.Tensor) -> torch.Tensor:
    """Lesson 5's bug: sin saves h, then h is overwritten in place."""
    h = a * 2
    y = h.sin()  # sin's rule needs the h of this moment: grad * cos(h)
    h.add_(1)  # the bug: overwrites the value sin saved
    return y.sum()


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
    error = error_of(lambda: y.backward())

    fixes = {}
    for name, fix in (("out-of-place (h + 1)", _fix_out_of_place), ("clone before mutating", _fix_clone),
                      ("reorder (backward, then mutate)", _fix_reorder)):
        leaf = base.clone().requires_grad_(True)
        grad, h_next = fix(leaf)
        fixes[name] = (max_diff(grad, _reference_grad(leaf)), torch.equal(h_next, 2 * base + 1))

    # the version counter counts writes, not changes: a write that restores the value still counts
    b = base.clone().requires_grad_(True)
    hb = b * 2
    yb = hb.sin()
    before = hb.detach().clone()
    hb.mul_(2)
    hb.div_(2)  # exact in float32 for these values: the saved value is unchanged
    restored = torch.equal(hb, before)
    restored_error = error_of(lambda: yb.sum().backward())

    # an overwrite that still prints a plausible number: clamp (an in-place ReLU) on the saved h
    c = base.clone().requires_grad_(True)
    hc = c * 2
    yc = hc.sin()
    hc.clamp_(min=0)
    clamp_error = error_of(lambda: yc.sum().backward())

    # .data writes without bumping the version: no error, and a silently wrong gradient
    d = base.clone().requires_grad_(True)
    hd = d * 2
    yd = hd.sin()
    hd.data.clamp_(min=0)
    yd.sum().backward()
    data_diff = max_diff(d.grad, _reference_grad(d))
    used_new = max_diff(d.grad, 2 * torch.cos(hd.detach()))

    # views, .detach() and writes under no_grad share / bump the same counter
    shared = {}
    for name, write in (("a view: h[:2].add_(0)", lambda t: t[:2].add_(0)),
                        ("h.detach().add_(0)", lambda t: t.detach().add_(0)),
                        ("under torch.no_grad(): h.add_(0)", lambda t: _no_grad_add(t))):
        t = base.clone().requires_grad_(True) * 2
        v0 = version(t)
        write(t)
        shared[name] = version(t) - v0

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
