"""Third-party models nobody here wrote (issue 38), in the setups people use to save memory:
transformers' GPT-2 (also with gradient checkpointing and under bfloat16 autocast), BERT, Llama,
T5 and ViT from small configs, a packed bidirectional LSTM + GRU, a torch.compile'd resnet-like
stack, torchvision's resnet18 and mobilenet_v3, timm's convnext. For each: gradients bitwise equal
to a plain run, every node with a rule, saved bytes equal to the distinct storages a pack hook
receives (the one allowed difference: wrapped Python scalars, which autograd never hands to a hook),
every free point observed, module labels real. A model whose package is missing or does not import
is skipped with the reason (`pip install -e '.[models]'`)."""

from __future__ import annotations

import importlib

import pytest
import torch
from real_models import THIRD_PARTY

import tracekit as tk
from tracekit.rules import NOT_DESCRIBED
from tracekit.storage import storage_key

pytestmark = pytest.mark.slow


def _need(packages: tuple[str, ...]) -> None:
    for package in packages:
        try:
            importlib.import_module(package)
        except Exception as err:  # torchvision beside a torch it was not built for raises RuntimeError
            pytest.skip(f"{package} does not import here ({type(err).__name__}: {str(err)[:80]}): "
                        "pip install -e '.[models]'")


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


RUNS: dict[str, tuple] = {}


def _run(name: str) -> tuple:
    """(model, trace after backward, storages a pack hook received, plain grads, traced grads), once per model."""
    if name in RUNS:
        return RUNS[name]
    packages, build = THIRD_PARTY[name]
    _need(packages)
    torch.manual_seed(0)
    model, run = build()
    torch.manual_seed(1)
    run().backward()
    plain = _grads(model)
    seen: dict = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[storage_key(t)] = t.untyped_storage().nbytes()
        return t

    torch.manual_seed(1)  # the same dropout masks
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), tk.capture() as cap:
        loss = run()
    tr = cap.trace(loss)
    tr.backward()
    RUNS[name] = result = (model, tr, seen, plain, _grads(model))
    return result


MODELS = sorted(THIRD_PARTY)


@pytest.mark.parametrize("name", MODELS)
def test_gradients_are_bitwise_those_of_a_plain_run(name):
    _, tr, _, plain, traced = _run(name)
    assert plain and set(plain) == set(traced)
    assert all(torch.equal(plain[k], traced[k]) for k in plain)
    assert tr.lifetimes().kind == "observed"


@pytest.mark.parametrize("name", MODELS)
def test_every_node_has_a_rule(name):
    _, tr, _, _, _ = _run(name)
    assert [n.name for n in tr.nodes if not n.described] == []
    assert [r.label for r in tr.residuals if r.rule == NOT_DESCRIBED] == []


@pytest.mark.parametrize("name", MODELS)
def test_saved_bytes_are_the_storages_a_pack_hook_receives(name):
    _, tr, seen, _, _ = _run(name)
    traced = {s.key: s for s in tr.storages}
    assert set(seen) <= set(traced)
    # allowed: wrapped Python scalars (`x * 0.5`'s 0.5 as a 0-dim tensor), which autograd saves without hooks
    extra = [traced[k] for k in set(traced) - set(seen)]
    assert all(s.nbytes <= 8 and all(r.shape == () for r in s.residuals) for s in extra)
    assert tr.saved_bytes - sum(s.nbytes for s in extra) == sum(seen.values()) > 0


@pytest.mark.parametrize("name", MODELS)
def test_every_free_point_is_observed(name):
    _, tr, _, _, _ = _run(name)
    owned = tr.graph_owned_storages()
    assert owned
    assert [r.label for s in owned for r in s.residuals if r.freed_at is None and r.lifetime.note is None] == []
    # what backward leaves alive is named: parameters, buffers, inputs, the output
    held = [r for r in tr.residuals if r.freed_at is None and r.lifetime.note is None]
    assert [r.label for r in held if r.held_by is None or "outside this graph" in r.held_by] == []


@pytest.mark.parametrize("name", MODELS)
def test_module_labels_are_real_paths_or_say_so(name):
    model, tr, _, _, _ = _run(name)
    paths = {path for path, _ in model.named_modules()}
    classes = {type(m).__name__ for m in model.modules()}
    for label in {n.module for n in tr.nodes if n.module is not None}:
        path, _, kind = label.rpartition(" (")
        if not path:  # the outermost module called: its class alone
            assert label in classes
        elif kind == "made during the call)":  # a module forward made (BERT's CrossEntropyLoss): not in the tree
            assert path.isidentifier() and path not in classes
        else:
            assert path in paths and kind.rstrip(")") in classes, label


def test_checkpointing_shows_what_the_checkpoint_keeps():
    _, tr, seen, _, _ = _run("gpt2_checkpointing")
    kept = [r for r in tr.residuals if r.slot.startswith("checkpoint ")]
    assert len({r.node.index for r in kept}) == 2  # one region per layer
    hidden = [r for r in kept if r.slot == "checkpoint args[0]"]
    assert len(hidden) == 2 and all(r.shape == (2, 8, 32) and r.role.startswith("output of #") for r in hidden)
    assert all(r.storage.key in seen for r in kept)  # the pack hook received each one
    assert any(r.held_in.startswith("recomputed") for r in tr.residuals)


def test_compiled_model_is_captured_as_compiled():
    _, tr, _, _, _ = _run("compiled_resnet")
    names = [n.name for n in tr.nodes]
    assert "CompiledFunctionBackward" in names and "ConvolutionBackward0" not in names
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_autocast_bfloat16_dtypes_and_bytes():
    _, tr, _, _, _ = _run("gpt2_bf16")
    dtypes = {r.dtype for r in tr.residuals if r.shape}
    assert {"bfloat16", "float32"} <= dtypes
    size = {"bfloat16": 2, "float32": 4, "int64": 8, "bool": 1}
    for r in tr.residuals:
        if r.shape is not None and r.dtype in size:
            assert r.nbytes == size[r.dtype] * torch.Size(r.shape).numel()
    mm = [r for n in tr.nodes if n.name == "AddmmBackward0" for r in n.residuals if r.slot == "mat1"]
    assert mm and all(r.dtype == "bfloat16" for r in mm)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet"])
def test_batchnorm_running_stats_are_the_modules_buffers(name):
    model, tr, _, _, _ = _run(name)
    stats = [r for r in tr.residuals if r.slot in ("running_mean", "running_var")]
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert len(stats) == 2 * n_bn
    assert all(r.held_by.startswith("the module's buffer model.") for r in stats)


def test_bert_loss_module_made_inside_forward():
    _, tr, _, _, _ = _run("bert")
    assert "CrossEntropyLoss (made during the call)" in {n.module for n in tr.nodes}


def test_gpt2s_first_picture_fits_a_1280_by_900_screen_at_full_size():
    import re

    from tracekit.render.svg import render_svg

    _, tr, _, _, _ = _run("gpt2")
    svg = render_svg(tr._repr_mimebundle_()["image/svg+xml"] and tr.overview().source)
    width, height = (float(v) * 4 / 3 for v in re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    assert width <= 1280 and height <= 900
    assert "h.0–1 (GPT2Block) ×2" in svg and "×2" in tr._repr_mimebundle_()["image/svg+xml"]
    assert "c_attn" in tr.draw_module("transformer.h.0.attn").source
