"""PyTorch's own rules from the installed torch's derivatives.yaml: node names made as torchgen
makes them (checked against the classes torch really has), and every node of four real models
and of tk.transformer's blocks has a rule that reads its saved slots."""

import pytest
import torch
from real_models import MODELS

from tracekit import derivatives
from tracekit.rules import NOT_DESCRIBED, described, rule_table


def test_every_name_made_is_a_real_backward_class():
    real = {n for n in dir(torch._C._functions) if "Backward" in n}
    made = set(derivatives.table())
    assert len(made) > 400
    assert made <= real, sorted(made - real)[:10]


@pytest.mark.parametrize("name,op,inputs", [
    ("ConvolutionBackward0", "convolution", ("input", "weight", "bias")),
    ("NativeBatchNormBackward0", "native_batch_norm", ("input", "weight", "bias")),
    ("MaxPool2DWithIndicesBackward0", "max_pool2d_with_indices", ("self",)),
    ("SafeSoftmaxBackward0", "_safe_softmax", ("self",)),
    ("MkldnnRnnLayerBackward0", "mkldnn_rnn_layer",
     ("input", "weight0", "weight1", "weight2", "weight3", "hx_", "cx_")),
    ("ScaledDotProductFlashAttentionForCpuBackward0", "_scaled_dot_product_flash_attention_for_cpu",
     ("query", "key", "value")),
    ("RsqrtBackward0", "rsqrt", ("self",)),
    ("SiluBackward0", "silu", ("self",)),
    ("SplitBackward0", "split", ("self",)),
    ("MaskedFillBackward0", "masked_fill", ("self",)),
])
def test_named_nodes_get_pytorchs_entry(name, op, inputs):
    d = derivatives.lookup(name)
    assert d is not None and d.op == op and d.inputs == inputs
    assert d.schema.startswith(op + "(") or d.schema.startswith(op + ".")
    table = rule_table(name)
    assert table is not None and all(f.startswith(derivatives.MARK) for f in table.values())


def test_lesson_table_comes_first():
    assert rule_table("MulBackward0") == {"self": "grad * other", "other": "grad * self"}
    # a custom Function's node (`<Function>Backward`) reads as its own backward (issue 38); a name that is
    # no node PyTorch makes has no rule
    assert rule_table("SavesOutputBackward") == {"inputs": "SavesOutput.backward(ctx, grad), reading saved_tensors"}
    assert not described("NotANodeBackward0") and derivatives.lookup("NotANodeBackward0") is None


def test_metadata_reads_are_not_tensor_reads():
    assert derivatives.reads_text("split_backward(grads, split_size, dim, self.sym_sizes(), self.options())") == \
        "split_backward(grads, split_size, dim, self_sym_sizes(), self_options())"
    assert derivatives.shown("grad.defined() ? f(grad, self) : std::tuple<Tensor, Tensor>()") == "f(grad, self)"


def _from_pytorch(name: str) -> bool:
    table = rule_table(name)
    return table is not None and next(iter(table.values())).startswith(derivatives.MARK)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_node_of_a_real_model_has_its_rule(model):
    tr = MODELS[model]()
    assert not [n.name for n in tr.nodes if not n.described]
    # every saved tensor is read by the rule, in words
    unread = [(r.label, r.rule) for r in tr.residuals if r.rule == NOT_DESCRIBED or r.rule.startswith("saved, not")]
    assert not unread
    yaml_nodes = [n for n in tr.nodes if _from_pytorch(n.name)]
    assert yaml_nodes  # each model has at least one node only PyTorch's text describes
    for n in yaml_nodes:
        assert {r.slot for r in n.reads()} == {r.slot for r in n.residuals}, n.name


def test_pytorchs_rule_text_reads_the_real_slots():
    """ConvolutionBackward0 saves input and weight; its formula reads both (bias only by size)."""
    tr = MODELS["cnn"]()
    conv = next(n for n in tr.nodes if n.name == "ConvolutionBackward0")
    assert sorted(r.slot for r in conv.residuals) == ["input", "weight"]
    assert conv.residuals[0].rule.startswith("PyTorch: grad_{input, weight, bias} = convolution_backward")
