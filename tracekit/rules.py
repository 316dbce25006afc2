"""The reverse rules, as a table a student can read.

Each entry maps a PyTorch backward node to the gradient of each of its inputs, in the
order PyTorch lists them (`grad_fn.next_functions`). A name in a formula that is one of
the node's saved slots (`self`, `other`, `result`, `mat2`, ...) is a residual the rule
reads; `grad` is the incoming gradient. Like HIPS/autograd's `defvjp` lines, the table
shows at a glance whether a rule needs an input (`self`) or the output (`result`).

A node the table does not write out gets PyTorch's own formula from the installed torch's
derivatives.yaml (derivatives.py), marked `PyTorch: ` in every view.
"""

from __future__ import annotations

import functools
import re

from . import derivatives

RULES: dict[str, dict[str, str]] = {
    # arithmetic
    "MulBackward0": {"self": "grad * other", "other": "grad * self"},
    "MulBackward1": {"self": "grad * other"},
    "DivBackward0": {"self": "grad / other", "other": "-grad * self / other**2"},
    "DivBackward1": {"self": "grad / other"},
    "AddBackward0": {"self": "grad", "other": "grad * alpha"},
    "AddBackward1": {"self": "grad"},
    "SubBackward0": {"self": "grad", "other": "-grad * alpha"},
    "SubBackward1": {"self": "grad"},
    "RsubBackward0": {"self": "-grad * alpha", "other": "grad"},
    "RsubBackward1": {"self": "-grad * alpha"},
    "NegBackward0": {"self": "-grad"},
    "PowBackward0": {"self": "grad * exponent * self**(exponent - 1)"},
    "PowBackward1": {"self": "grad * exponent * self**(exponent - 1)",
                     "exponent": "grad * result * log(self)"},
    "SqrtBackward0": {"self": "grad / (2 * result)"},
    # pointwise functions: some read their input, some their own output
    "ExpBackward0": {"self": "grad * result"},
    "LogBackward0": {"self": "grad / self"},
    "SigmoidBackward0": {"self": "grad * result * (1 - result)"},
    "TanhBackward0": {"self": "grad * (1 - result**2)"},
    "ReluBackward0": {"self": "grad * (result > 0)"},
    "GeluBackward0": {"self": "grad * gelu'(self)"},
    "SinBackward0": {"self": "grad * cos(self)"},
    "CosBackward0": {"self": "-grad * sin(self)"},
    # matrix products (F.linear is addmm, or mm + view, with a transposed weight: no LinearBackward0 in 2.13)
    "MmBackward0": {"self": "grad @ mat2.T", "mat2": "self.T @ grad"},
    "BmmBackward0": {"self": "grad @ mat2.mT", "mat2": "self.mT @ grad"},
    "MvBackward0": {"self": "outer(grad, vec)", "vec": "self.T @ grad"},
    "DotBackward0": {"self": "grad * tensor", "tensor": "grad * self"},
    "AddmmBackward0": {"self": "grad * beta", "mat1": "grad @ mat2.T * alpha",
                       "mat2": "mat1.T @ grad * alpha"},
    # reductions and normalisations
    "SumBackward0": {"self": "grad.expand(self_sym_sizes)"},
    "SumBackward1": {"self": "grad.expand(self_sym_sizes)"},
    "MeanBackward0": {"self": "grad.expand(self_sym_sizes) / self_sym_numel"},
    "MeanBackward1": {"self": "grad.expand(self_sym_sizes) / (elements averaged)"},
    "SoftmaxBackward0": {"self": "result * (grad - (grad * result).sum(dim))"},
    "LogSoftmaxBackward0": {"self": "grad - exp(result) * grad.sum(dim)"},
    "NativeLayerNormBackward0": {
        "input": "layer_norm_backward(grad, input, mean=result1, rstd=result2, weight, bias)",
        "weight": "(grad * (input - result1) * result2).sum()",
        "bias": "grad.sum()",
    },
    "NativeDropoutBackward0": {"input": "grad * result1 / (1 - p)"},
    "EmbeddingBackward0": {"weight": "index_add(zeros(weight_sym_argsize_0), indices, grad)"},
    # views and layout: no residual, only sizes
    "ViewBackward0": {"self": "grad.view(self_sym_sizes)"},
    "UnsafeViewBackward0": {"self": "grad.reshape(self_sym_sizes)"},
    "ReshapeAliasBackward0": {"self": "grad.reshape(self_sym_sizes)"},
    "SliceBackward0": {"self": "zeros(self_sym_sizes)[start:end:step] = grad"},
    "SelectBackward0": {"self": "zeros(self_sym_sizes).select(dim, index) = grad"},
    "TransposeBackward0": {"self": "grad.transpose(dim0, dim1)"},
    "TBackward0": {"self": "grad.t()"},
    "PermuteBackward0": {"self": "grad.permute(inverse of dims)"},
    "ExpandBackward0": {"self": "grad.sum_to_size(self_sym_sizes)"},
    "CloneBackward0": {"self": "grad"},
    "CatBackward0": {"tensors": "grad.split(sizes of tensors, dim)[i]"},
    "StackBackward0": {"tensors": "grad.unbind(dim)[i]"},
}

# The engine's own nodes (torch/csrc/autograd/functions: basic_ops.h, tensor.h, comm.h,
# accumulate_grad.h), which derivatives.yaml does not list; `tests/test_rules.py` builds each one
# that a CPU build can make. Their names carry the C++ namespace, as `grad_fn.name()` gives them.
ENGINE_RULES: dict[str, dict[str, str]] = {
    # an in-place write into a view (`x[0] = y`, `x[1] *= w`): the base gets grad with the written
    # part replaced by what the wrapped op's rule gives; the wrapped op's inputs get its rule on grad[view]
    "torch::autograd::CopySlices": {"self": "grad with grad[view] = op's rule for the overwritten view",
                                    "src": "op's rule applied to grad[view]"},
    "torch::autograd::CopyBackwards": {"self": "zeros_like(grad) (copy_ overwrote it)",
                                       "src": "grad.to(src's dtype and device)"},
    "torch::autograd::AccumulateGrad": {"variable": "variable.grad += grad"},
    "torch::autograd::GraphRoot": {"outputs": "the gradients backward() was given (ones for a scalar)"},
    "torch::autograd::Identity": {"self": "grad"},
    "torch::autograd::Error": {"self": "raises: this op has no derivative"},
    "torch::autograd::NotImplemented": {"self": "raises: this op's derivative is not implemented"},
    "torch::autograd::DelayedError": {"self": "grad (raises only if differentiated once more)"},
    "torch::autograd::UndefinedGrad": {"self": "grad (undefined)"},
    "torch::autograd::UndefinedGradBackward": {"self": "undefined (no gradient flows)"},
    "torch::autograd::Scatter": {"self": "gather(grad from each device)"},
    "torch::autograd::Gather": {"tensors": "grad.chunk(devices)[i]"},
}
# Python autograd.Functions (PyNode: `<Function>Backward`): the Function's own backward, with the
# tensors its forward saved; a few that torch itself defines, in words.
CUSTOM_RULES: dict[str, str] = {
    "CompiledFunctionBackward": "the compiled backward graph (AOTAutograd) on grad and saved_tensors",
    "BackwardHookFunctionBackward": "grad (passed through: a module's full backward hook sees it)",
    "CheckpointFunctionBackward": "reruns the checkpointed forward, then its backward on grad (reentrant)",
    "_NoopSaveInputsBackward": "nothing (it keeps a checkpoint's inputs in saved_tensors for recompute)",
}
_CUSTOM_NODE = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*Backward$|^torch::autograd::CppNode<")

NOT_DESCRIBED = "rule not described yet"
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


@functools.cache
def rule_table(node_name: str) -> dict[str, str] | None:
    """input -> gradient formula for a node: the lesson table's, else PyTorch's (marked), else None."""
    table = RULES.get(node_name) or ENGINE_RULES.get(node_name)
    if table is not None:
        return table
    if _CUSTOM_NODE.match(node_name):
        function = node_name.removesuffix("Backward")
        words = CUSTOM_RULES.get(node_name) or f"{function}.backward(ctx, grad), reading saved_tensors"
        return {"inputs": words}
    found = derivatives.lookup(node_name)
    if found is None:
        return None
    return {name: derivatives.MARK + formula for name, formula in found.input_rules().items()}


def described(node_name: str) -> bool:
    """Whether a node has a rule: in the lesson table or PyTorch's derivatives.yaml."""
    return rule_table(node_name) is not None


def input_rules(node_name: str, n_inputs: int) -> list[tuple[str, str]] | None:
    """(input name, gradient formula) for each input of a node, or None if it has no rule."""
    table = rule_table(node_name)
    if table is None:
        return None
    items = list(table.items())
    if len(items) == 1 and n_inputs > 1:  # one formula for a list input (cat, stack)
        name, formula = items[0]
        return [(f"{name}[{i}]", formula) for i in range(n_inputs)]
    return items[:n_inputs] if n_inputs else items


def slots_read(formula: str, slots: set[str]) -> list[str]:
    """The saved slots a formula reads, in the order they appear."""
    seen: list[str] = []
    if formula.startswith(derivatives.MARK):  # `self.sym_sizes()` reads sizes, not the tensor
        formula = derivatives.reads_text(formula)
    for name in _NAME.findall(formula):
        if name in slots and name not in seen:
            seen.append(name)
    return seen


@functools.cache
def _reads(node_name: str, n_inputs: int, slots: frozenset[str]) -> tuple[tuple[str, str, tuple[str, ...]], ...] | None:
    """The one join of rules and slots: (input name, formula, saved slots it reads) per input."""
    table = input_rules(node_name, n_inputs)
    if table is None:
        return None
    return tuple((name, formula, tuple(slots_read(formula, set(slots)))) for name, formula in table)


@functools.cache
def rules_by_slot(node_name: str, n_inputs: int, slots: frozenset[str]) -> dict[str, str] | None:
    """slot -> the gradient formulas that read it (`grad_self = grad * other; ...`), or None
    if the node is not in the table. `slots`: the node's saved slot names, without indices."""
    reads = _reads(node_name, n_inputs, slots)
    if reads is None:
        return None
    by_slot: dict[str, dict[str, list[str]]] = {}  # slot -> formula -> the inputs it gives
    for name, formula, read in reads:
        for slot in read:
            by_slot.setdefault(slot, {}).setdefault(formula, []).append(f"grad_{name}")
    return {slot: "; ".join(assignment(names, formula) for formula, names in found.items())
            for slot, found in by_slot.items()}


def assignment(names: list[str], formula: str) -> str:
    """`grad_self = grad * other` for each name; one PyTorch formula giving several inputs names
    them all once, marked first."""
    if formula.startswith(derivatives.MARK):
        given = names[0] if len(names) == 1 else "grad_{" + ", ".join(n.removeprefix("grad_") for n in names) + "}"
        return f"{derivatives.MARK}{given} = {formula.removeprefix(derivatives.MARK)}"
    return "; ".join(f"{name} = {formula}" for name in names)


def rule_text(slot: str, by_slot: dict[str, str] | None) -> str:
    """What reads one saved slot (`tensors[1]` is read as `tensors`), in words."""
    if by_slot is None:
        return NOT_DESCRIBED
    return by_slot.get(slot.partition("[")[0]) or "saved, not read by the rules described"


@functools.lru_cache(maxsize=4096)
def slots_read_for(node_name: str, needed: tuple[bool, ...], slots: tuple[str, ...]) -> frozenset[str]:
    """Which of these slots (`self`, `tensors[1]`, ...) the rule reads when only the gradients
    of the `needed` inputs are wanted."""
    reads = _reads(node_name, len(needed), frozenset(s.partition("[")[0] for s in slots)) or ()
    read = {slot for (_, _, r), need in zip(reads, needed) if need for slot in r}
    return frozenset(s for s in slots if s.partition("[")[0] in read)
