"""ex07 judges: pack-hook counts and a user store, observed now.

q1: correct = the number of pack calls, counted by running the program under counting hooks.
Wrong: counting ops instead of saved tensors; forgetting the saved scalar, or a value saved
twice (sin and cos both save a: two packs).
q2: correct = gradients right with two graphs alive, each backwarded twice in interleaved
order, in float32 or float64; pack never returns a tensor; nothing the hooks created is alive
once the graphs are gone (a handle object that frees its entry). Look-right-but-wrong:
`len(STORE)` keys (collide once an entry is removed), `pop` on unpack (second unpack fails),
one global slot (the second graph overwrites the first), returning the tensor itself, a store
that never lets go (grows with every graph).
"""

from __future__ import annotations

import torch

from ..ex07 import PROGRAMS
from .common import by_table, close, parts


def pack_calls(program: str) -> int:
    """Pack-hook calls while the program runs, counted now."""
    src, who = PROGRAMS[program]
    env = {"a": torch.randn(5, requires_grad="a" in who), "b": torch.randn(5, requires_grad="b" in who),
           "x": torch.randn(2, 3), "W": torch.randn(3, 4, requires_grad="W" in who)}
    calls = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        eval(src, env)  # noqa: S307 - our own program text
    return len(calls)


def _calls_entry(program: str, got: object) -> tuple[bool, str]:
    if type(got) is not int:
        return False, "give an int"
    truth = pack_calls(program)
    if got == truth:
        return True, ""
    return False, ("too many: count the tensors the rules save, not the ops" if got > truth else
                   "too few: every saved tensor is packed, each time a rule saves it")


def judge_q2(obs: dict, inputs: dict) -> tuple[float, str]:
    """Gradients under every use; handles not tensors; nothing alive after the graphs go."""
    dtype = getattr(torch, inputs["dtype"])
    want = []
    for key, f in (("a1", lambda t: (t.exp() * t.sin()).sum()), ("a2", lambda t: (t.tanh() * t).sum())):
        a = torch.tensor(inputs[key], dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(f(a), a)
        want.append((2 * g).double().tolist())
    grads = obs.get("grads") or [None, None]
    tol = 1e-9 if inputs["dtype"] == "float64" else 1e-5
    packed = obs.get("packed") or []
    alive = obs.get("alive_after")
    return parts(
        (len(grads) == 2 and close(grads[0], want[0], tol) and close(grads[1], want[1], tol),
         "gradients changed: with two graphs alive and each backwarded twice, every unpack must return "
         "exactly the tensor its own pack received (unique handles, still valid on a second unpack)"),
        (bool(packed) and "tensor" not in packed, "pack must return a handle, not the tensor: keep the tensor in "
                                                 "your own store"),
        (type(alive) is int and alive == 0, "your store still holds tensors after their graphs were freed: let "
                                            "an entry go when its handle is dropped"),
    )


JUDGES = {"q1": by_table(_calls_entry), "q2": judge_q2}
