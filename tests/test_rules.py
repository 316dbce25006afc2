"""Every entry of the reverse-rule table, checked against a real PyTorch node (as MiniTorch
tests each derivative rule): the node is built, its name is the table's key, it has one
rule per input, every name a formula reads is a real saved slot of that node (or a plain
word of the formula's language), and every tensor the node saves is read by some rule.
A PyTorch upgrade that renames a slot or a node fails here, loudly."""

import pytest
import torch
import torch.nn.functional as F

from tracekit.rules import RULES, input_rules, slots_read

A = torch.ops.aten


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def pos(*shape: int) -> torch.Tensor:
    return (torch.rand(*shape, dtype=torch.float64) + 0.5).requires_grad_(True)


# One real program per table entry; the output's grad_fn must be that node.
BUILD = {
    "MulBackward0": lambda: r(3) * r(3),
    "MulBackward1": lambda: A.mul.Scalar(r(3), 2.0),
    "DivBackward0": lambda: r(3) / pos(3),
    "DivBackward1": lambda: A.div.Scalar(r(3), 2.0),
    "AddBackward0": lambda: r(3) + r(3),
    "AddBackward1": lambda: A.add.Scalar(r(3), 2.0),
    "SubBackward0": lambda: r(3) - r(3),
    "SubBackward1": lambda: A.sub.Scalar(r(3), 2.0),
    "RsubBackward0": lambda: torch.rsub(r(3), r(3)),
    "RsubBackward1": lambda: 2.0 - r(3),
    "NegBackward0": lambda: -r(3),
    "PowBackward0": lambda: r(3) ** 2,
    "PowBackward1": lambda: pos(3) ** r(3),
    "SqrtBackward0": lambda: pos(3).sqrt(),
    "ExpBackward0": lambda: r(3).exp(),
    "LogBackward0": lambda: pos(3).log(),
    "SigmoidBackward0": lambda: r(3).sigmoid(),
    "TanhBackward0": lambda: r(3).tanh(),
    "ReluBackward0": lambda: r(3).relu(),
    "GeluBackward0": lambda: F.gelu(r(3)),
    "SinBackward0": lambda: r(3).sin(),
    "CosBackward0": lambda: r(3).cos(),
    "MmBackward0": lambda: r(2, 3) @ r(3, 4),
    "BmmBackward0": lambda: torch.bmm(r(2, 2, 3), r(2, 3, 4)),
    "MvBackward0": lambda: torch.mv(r(2, 3), r(3)),
    "DotBackward0": lambda: torch.dot(r(3), r(3)),
    "AddmmBackward0": lambda: F.linear(r(2, 3), r(4, 3), r(4)),
    "SumBackward0": lambda: r(3).sum(),
    "SumBackward1": lambda: r(2, 3).sum(1),
    "MeanBackward0": lambda: r(3).mean(),
    "MeanBackward1": lambda: r(2, 3).mean(1),
    "SoftmaxBackward0": lambda: r(2, 3).softmax(1),
    "LogSoftmaxBackward0": lambda: r(2, 3).log_softmax(1),
    "NativeLayerNormBackward0": lambda: F.layer_norm(r(2, 3), (3,), r(3), r(3)),
    "NativeDropoutBackward0": lambda: torch.native_dropout(r(4, 4), 0.5, True)[0],
    "EmbeddingBackward0": lambda: F.embedding(torch.tensor([0, 2]), r(4, 3)),
    "ViewBackward0": lambda: r(2, 3).view(6),
    "UnsafeViewBackward0": lambda: r(2, 2, 3) @ r(3, 4),
    "ReshapeAliasBackward0": lambda: A._reshape_alias(r(2, 3), [6], [1]),
    "SliceBackward0": lambda: r(4)[1:3],
    "SelectBackward0": lambda: r(4, 3)[1],
    "TransposeBackward0": lambda: r(2, 3).transpose(0, 1),
    "TBackward0": lambda: r(2, 3).t(),
    "PermuteBackward0": lambda: r(2, 3, 4).permute(2, 0, 1),
    "ExpandBackward0": lambda: r(1, 3).expand(2, 3),
    "CloneBackward0": lambda: r(3).clone(),
    "CatBackward0": lambda: torch.cat([r(2), r(3)]),
    "StackBackward0": lambda: torch.stack([r(2), r(2)]),
}

# Words a formula may use that are not saved slots: the incoming gradient, functions,
# methods and plain prose. Anything else in a formula must be a slot of the real node.
WORDS = {
    "grad", "zeros", "log", "exp", "sum", "expand", "view", "reshape", "split", "unbind", "transpose", "t",
    "permute", "sum_to_size", "select", "outer", "index_add", "layer_norm_backward", "gelu", "T", "mT",
    "inverse", "of", "elements", "averaged", "mean", "rstd", "i", "sizes", "tensors", "sin", "cos",
}


def saved_names(node) -> set[str]:
    return {a[len("_saved_"):] for a in dir(node) if a.startswith("_saved_")}


def saved_tensor_slots(node) -> set[str]:
    out = set()
    for name in saved_names(node):
        value = getattr(node, "_saved_" + name)
        if isinstance(value, torch.Tensor) or (
            isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value)
        ):
            out.add(name)
    return out


def test_every_rule_has_a_builder_and_every_builder_a_rule():
    assert set(BUILD) == set(RULES)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_matches_the_real_pytorch_node(name):
    import re

    node = BUILD[name]().grad_fn
    assert type(node).__name__ == name, f"{name}: PyTorch now makes {type(node).__name__} for this program"
    slots = saved_names(node)
    rules = input_rules(name, len(node.next_functions))
    assert rules is not None and len(rules) == len(node.next_functions), (
        f"{name}: the table has {len(RULES[name])} input rules, the node has {len(node.next_functions)} inputs"
    )
    read = set()
    for input_name, formula in RULES[name].items():
        identifiers = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", formula))
        unknown = identifiers - slots - WORDS
        assert not unknown, f"{name}[{input_name}]: {sorted(unknown)} is not a saved slot of the node ({sorted(slots)})"
        read |= set(slots_read(formula, slots))
    missing = saved_tensor_slots(node) - read
    assert not missing, f"{name}: the node saves {sorted(missing)} but no rule in the table reads it"


def test_slots_read_keeps_formula_order_and_ignores_non_slots():
    assert slots_read("grad * result * (1 - result)", {"result", "self"}) == ["result"]
    assert slots_read("self.T @ grad", {"self", "mat2"}) == ["self"]
    assert slots_read("grad @ mat2.T * alpha", {"mat1", "mat2", "alpha"}) == ["mat2", "alpha"]
