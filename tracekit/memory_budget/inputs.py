"""What `budget()` is given: the batch forms (a tensor, (inputs, targets), a dict) and their
checks, the loss, micro-batches for accumulation, and the built-in training step."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..errors import BudgetInputError

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

TARGET_KEYS = ("target", "targets", "label", "labels", "y")
FORMS = (
    "tk.budget accepts: batch=tensor (model(batch), loss_fn(output)); batch=(inputs, targets) "
    "(model(inputs), loss_fn(output, targets)); batch=dict (target under one of "
    f"{', '.join(TARGET_KEYS)}, the rest as model(**kwargs); without loss_fn the model returns its "
    "own loss); or step=callable doing forward, loss, backward and optimizer.step() itself."
)


def _tensors_in(value: Any, depth: int = 4) -> Iterator[torch.Tensor]:
    """Tensors in a value and its containers (tuples, lists, sets, dicts), a few levels deep."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth and isinstance(value, (tuple, list, set, frozenset)):
        for v in value:
            yield from _tensors_in(v, depth - 1)
    elif depth and isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v, depth - 1)


def _positional(fn: Callable[..., Any]) -> tuple[int, int] | None:
    """(required, accepted) positional arguments of fn; None when Python cannot say."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    many = any(p.kind == p.VAR_POSITIONAL for p in params)
    return sum(p.default is p.empty for p in pos), (10**6 if many else len(pos))


def _split_batch(batch: Any) -> tuple[Any, Any, bool]:
    """(inputs, target, has_target) for the accepted batch forms, or BudgetInputError."""
    if isinstance(batch, torch.Tensor):
        return batch, None, False
    if isinstance(batch, (tuple, list)):
        if len(batch) == 1:
            return batch[0], None, False
        if len(batch) == 2:
            return batch[0], batch[1], True
        raise BudgetInputError(f"batch is a {type(batch).__name__} of {len(batch)} items; expected (inputs, targets) "
                               f"or (inputs,). {FORMS}")
    if isinstance(batch, dict):
        if not all(isinstance(k, str) for k in batch):
            raise BudgetInputError(f"batch is a dict with non-string keys; its entries are passed as keyword "
                                   f"arguments. {FORMS}")
        return batch, None, False
    raise BudgetInputError(f"batch is a {type(batch).__name__}. {FORMS}")


def _call_model(model: Callable[..., Any], inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _own_loss(output: Any) -> torch.Tensor | None:
    """The loss a model computed itself: a scalar output, or a `loss` entry or attribute."""
    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else None
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def _check_loss_fn(loss_fn: Callable[..., Any] | None, batch: Any) -> None:
    """Raise BudgetInputError if loss_fn cannot take what the batch form gives it."""
    inputs, target, has_target = _split_batch(batch)
    if isinstance(batch, dict) and loss_fn is not None:
        has_target = any(k in batch for k in TARGET_KEYS)
    if loss_fn is None:
        if has_target:
            raise BudgetInputError("batch has targets but no loss_fn was given: pass loss_fn(output, target), "
                                   f"e.g. torch.nn.functional.mse_loss. {FORMS}")
        return
    if not callable(loss_fn):
        raise BudgetInputError(f"loss_fn is a {type(loss_fn).__name__}, not a callable. {FORMS}")
    arity = _positional(loss_fn)
    if arity is None:
        return
    required, accepted = arity
    if has_target and accepted < 2:
        raise BudgetInputError("loss_fn takes one argument (output) but the batch has targets: pass "
                               f"loss_fn(output, target), or a batch without targets. {FORMS}")
    if not has_target and required > 1:
        raise BudgetInputError(f"loss_fn needs {required} arguments but the batch has no targets: pass "
                               f"batch=(inputs, targets) (or a dict with a target key). {FORMS}")


def _loss(model: Callable[..., Any], batch: Any, loss_fn: Callable[..., Any] | None) -> torch.Tensor:
    """Run the model on one batch (in the documented form) and return the scalar loss."""
    inputs, target, has_target = _split_batch(batch)
    if isinstance(batch, dict) and loss_fn is not None:
        key = next((k for k in TARGET_KEYS if k in batch), None)
        inputs = {k: v for k, v in batch.items() if k != key}
        target, has_target = (batch[key], True) if key is not None else (None, False)
    if loss_fn is not None:
        loss = loss_fn(_call_model(model, inputs), target) if has_target else loss_fn(_call_model(model, inputs))
    else:
        output = _call_model(model, inputs)
        loss = _own_loss(output)
        if loss is None:
            if isinstance(batch, dict) or not isinstance(output, torch.Tensor):
                raise BudgetInputError(f"without loss_fn the model must return its loss (a scalar tensor, or one "
                                       f"under 'loss'); it returned a {type(output).__name__}. {FORMS}")
            loss = output.float().pow(2).mean()  # a stand-in loss when the batch has no targets
        del output
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = type(loss).__name__ if not isinstance(loss, torch.Tensor) else f"a tensor of shape {tuple(loss.shape)}"
        raise BudgetInputError(f"the loss must be a scalar tensor; loss_fn returned {what}. {FORMS}")
    if loss.grad_fn is None:
        raise BudgetInputError("the loss has no autograd history: the model's parameters must require grad "
                               "and the step must not run under torch.no_grad().")
    return loss


def _micro_batches(batch: Any, k: int) -> list[Any]:
    """The batch cut into k micro-batches along dim 0 (views: no new memory)."""
    def cut(value: Any) -> list[Any]:
        if isinstance(value, torch.Tensor):
            if value.dim() == 0:
                return [value] * k
            if value.shape[0] < k:
                raise BudgetInputError(f"accumulate={k} needs at least {k} samples along dim 0; a batch tensor "
                                       f"has shape {tuple(value.shape)}.")
            return list(torch.tensor_split(value, k, dim=0))
        if isinstance(value, (tuple, list)):
            parts = [cut(v) for v in value]
            return [type(value)(p[i] for p in parts) for i in range(k)]
        if isinstance(value, dict):
            parts = {key: cut(v) for key, v in value.items()}
            return [{key: p[i] for key, p in parts.items()} for i in range(k)]
        return [value] * k

    return cut(batch)


def _builtin_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any, loss_fn: Callable[..., Any] | None,
    accumulate: int, autocast: torch.dtype | None, set_to_none: bool, device: torch.device,
) -> Callable[[], None]:
    """zero_grad; for each micro-batch forward, loss (÷ k), backward; optimizer.step()."""
    micro = _micro_batches(batch, accumulate) if accumulate > 1 else [batch]

    def step() -> None:
        optimizer.zero_grad(set_to_none=set_to_none)
        for part in micro:
            with torch.autocast(device.type, dtype=autocast) if autocast else contextlib.nullcontext():
                loss = _loss(model, part, loss_fn)
            if accumulate > 1:
                loss = loss / accumulate
            loss.backward()
        optimizer.step()

    return step
