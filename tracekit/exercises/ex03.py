"""ex03 · Memory by storage: what a graph really pins (probe side: no truth here)."""

from __future__ import annotations

import random

import torch

from .base import AnswerError, Exercise, Question, lesson_link, plain, student, values_probe

LESSON = "03_storage"
DTYPES = ("float32", "float64")


def _draw_slice(rng: random.Random) -> dict:
    cases = []  # both dtypes in every draw: no answer passes by a lucky draw
    for dtype in (*DTYPES, rng.choice(DTYPES)):
        n = rng.randint(16, 300)
        cases.append({"n": n, "k": rng.randint(1, min(n, 12)), "dtype": dtype})
    return {"cases": cases}


def _draw_views(rng: random.Random) -> dict:
    return {"cases": [{"n": rng.randint(8, 4000), "dtype": dtype} for dtype in (*DTYPES, rng.choice(DTYPES))]}


def _call(fn: object, case: dict) -> object:
    """The student's function on one drawn case, by keyword (dtype as a torch.dtype)."""
    return student(fn, **{k: getattr(torch, v) if k == "dtype" else v for k, v in case.items()})


def _int(value: object) -> int:
    """A whole number of any standard kind (int, numpy integer, 0-dim tensor, a float with no
    fraction such as 800.0) as an int."""
    number = plain(value) if not isinstance(value, list) else value
    if type(number) is float and number.is_integer():
        return int(number)
    if type(number) is not int:
        raise AnswerError(f"return whole numbers of bytes (got {type(value).__name__})")
    return number


def _ints(got: object) -> int | list[int]:
    """An int, or a list of ints (a tuple, a small tensor or array of them is read as one)."""
    if isinstance(got, torch.Tensor) and got.dim() > 0 and got.numel() <= 2:
        got = got.tolist()
    if hasattr(got, "tolist") and getattr(got, "ndim", 0) == 1:
        got = got.tolist()
    if isinstance(got, tuple | list):
        return [_int(v) for v in got]
    return _int(got)


_call_probe = values_probe("", _call, _ints)  # the function is named in the question


EXERCISE = Exercise(
    "ex03", "What a graph really pins", LESSON,
    (
        Question("q1", 2, "pinned_bytes(n, k, dtype): bytes the saved tensors of (big[0, :k] * w).sum() keep alive",
                 "pinned_bytes", probe=_call_probe, draw=_draw_slice, kind="code", details=(
                     "`w = torch.ones(k, dtype=dtype, requires_grad=True)`, `big = torch.randn(n, n, dtype=dtype)` "
                     "(does not require grad), `y = (big[0, :k] * w).sum()`. Return the bytes (a whole number: an "
                     "int, a numpy integer or a float such as 800.0 all count) of "
                     "the allocations (storages) that the graph's **saved tensors** keep alive — what "
                     "`tk.trace(y).saved_bytes` reports. Not `y` itself (you hold it), and not `w` unless a rule "
                     "saves it. `dtype` is `torch.float32` or `torch.float64`; each check calls your function on "
                     "three drawn (n, k, dtype), float32 and float64 among them. "
                     f"See {lesson_link(LESSON, 'A small slice pins a large allocation')}"
                     " (the lesson's measurement also counts the 4-byte output; this question does not)."),
                 stub="def pinned_bytes(n, k, dtype):\n    raise NotImplementedError"),
        Question("q2", 2, "visible_and_pinned(n, dtype): [visible bytes, pinned bytes] of "
                 "h = a * 2; (h[:-1] * h[1:]).sum()",
                 "visible_and_pinned", probe=_call_probe, draw=_draw_views, kind="code", details=(
                     "`a = torch.randn(n, dtype=dtype, requires_grad=True)`, `h = a * 2`, "
                     "`y = (h[:-1] * h[1:]).sum()`. Return `[visible, pinned]` (two ints): `visible` = the sum "
                     "of every saved tensor's own bytes (numel × element size, as `tk.trace(y).visible_bytes`), "
                     "`pinned` = the bytes of the distinct storages they keep alive (`saved_bytes`). Every "
                     "saved tensor counts, including the one the multiplication by the Python number 2 saves "
                     "(PyTorch wraps 2 as a 0-dim int64 tensor). Each check calls it on three drawn (n, dtype), "
                     "float32 and float64 among them. "
                     f"See {lesson_link(LESSON, 'Several views, one allocation')}."),
                 stub="def visible_and_pinned(n, dtype):\n    raise NotImplementedError  # return [visible, pinned]"),
    ),
)
