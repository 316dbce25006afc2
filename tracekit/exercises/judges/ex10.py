"""ex10 judges: the student's tape rules against torch.func.vjp and PyTorch's own residuals.

Correct: y and the input gradients equal torch's op and torch.func.vjp (float64 1e-12,
float32 1e-5), with both forwards run before either backward; `saved` holds exactly the
tensors PyTorch's rule saves when every input requires grad, identified by storage: div both
inputs, tanh its output, sin its input. Look-right-but-wrong: tanh saving x and recomputing
tanh (right gradient, not what PyTorch saves: half the points for that op), div saving 1/b or
a/b (new tensors), saving copies (`.clone()`: more memory), saving everything, or keeping
values in globals/closures instead of `saved` (the interleaved runs give wrong gradients). The
lesson's own rules (mul, exp, sigmoid) are not asked, so nothing is copied from it.
"""

from __future__ import annotations

import torch

from ...internals import saved_attribute, slot_names
from ..ex10 import tensors
from .common import case_list, close, parts

OPS = {"div": torch.div, "tanh": torch.tanh, "sin": torch.sin}


def pytorch_saves(op: str, case: dict) -> list[str]:
    """What PyTorch's own rule saves for this op, as roles (an input's name, or 'the output')."""
    xs = [t.clone().requires_grad_() for t in tensors(case)]
    y = OPS[op](*xs)
    names = ["a", "b"] if len(xs) == 2 else ["x"]
    roles = []
    for slot in (slot for group in slot_names(type(y.grad_fn)) for slot in group):
        value = saved_attribute(y.grad_fn, slot)
        if isinstance(value, torch.Tensor):
            ptr = value.untyped_storage().data_ptr()
            match = [n for n, x in zip(names, xs) if x.untyped_storage().data_ptr() == ptr]
            roles.append(match[0] if match else ("the output" if ptr == y.untyped_storage().data_ptr()
                                                 else "a new tensor"))
    return sorted(roles)


def judge(obs: dict, inputs: dict) -> tuple[float, str]:
    """Values and gradients (half), saved tensors as PyTorch's (half)."""
    op = inputs["op"]
    cases = case_list(obs, "cases", inputs)
    if cases is None:
        return 0.0, "the checker got no results from your rule"
    values_ok, saves_ok, theirs, ours = True, True, [], []
    for seen, case in zip(cases, inputs["cases"]):
        xs = [t.double() for t in tensors(case)]
        y, vjp = torch.func.vjp(OPS[op], *xs)
        grads = vjp(torch.tensor(case["g"], dtype=torch.float64).reshape(case["shape"]))
        tol = 1e-12 if case["dtype"] == "float64" else 1e-5
        seen_grads = seen.get("grads") or []
        grads_ok = len(seen_grads) == len(grads) and \
            all(close(s, g.flatten().tolist(), tol) for s, g in zip(seen_grads, grads))
        values_ok &= seen.get("dtype") == case["dtype"] and close(seen.get("y"), y.flatten().tolist(), tol) and grads_ok
        want = pytorch_saves(op, case)
        saves_ok &= seen.get("saved") == want
        theirs, ours = want, seen.get("saved")
    hint = f"PyTorch's {op} saves {' and '.join(theirs) or 'nothing'}"
    if isinstance(ours, list) and "a new tensor" in ours:
        hint += "; you save a new tensor (a copy or a recomputed value): save the tensors themselves"
    else:
        hint += f"; you save {' and '.join(ours) if ours else 'nothing'}"
    if not values_ok:  # the saved tensors count only for a rule that computes the right values
        return 0.0, ("y or the gradients differ from PyTorch's (torch.func.vjp): backward must use only `saved` "
                     "and `grad`, since other calls run in between")
    return parts((True, ""), (saves_ok, hint))


JUDGES = {"q1": judge, "q2": judge, "q3": judge}
