"""Every lifetime scenario on CPU (and CUDA where present), asserting its real outcome; the
registry the lessons read; the seeded models drawing exactly what they always drew."""

import ast
import importlib
import inspect
import pathlib
import pkgutil

import matplotlib
import pytest
import torch

import tracekit as tk
from tracekit import scenarios as sc
from tracekit.memory import NO_CUDA, check_device

matplotlib.use("Agg")
N = sc.N
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
MIB = 1 << 20
NAMES = ["repeated_backward", "retain_graph", "create_graph", "inplace", "recompute", "offload", "app_references",
         "storage_evidence"]


def run(name, device):
    """Run a scenario the way a lesson reading the registry would, and check what it returns."""
    r = sc.REGISTRY[name](device)
    assert isinstance(r, tk.ScenarioResult) and (r.scenario, r.device) == (name, device)
    return r


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_backward(device):
    r = run("repeated_backward", device)
    assert r.error.startswith("Trying to backward through the graph a second time")
    assert r.facts["second backward"] == f"RuntimeError: {r.error}"
    assert sorted(r.values["released"]) == [
        ("#0 ExpBackward0.result", 2), ("#1 MulBackward0.other", 1), ("#1 MulBackward0.self", 1)
    ]
    assert r.values["failing_step"] == 1
    assert r.values["no_residual_count"] == 0 and r.values["second_ok"]
    assert r.values["b_grad"] == [2.0]


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_measured_bytes_match_prediction(device):
    r = run("retain_graph", device)
    assert r.values["second_ok"] and r.values["grad_doubled"]
    assert r.values["live_residuals"] == 3
    expected = N * 4 + 4 if device == "cpu" else N * 4 + 512  # exp's result + y (CUDA: 512-byte blocks)
    assert r.values["predicted"] == expected
    assert r.values["freed_on_drop"] == expected


@pytest.mark.parametrize("device", DEVICES)
def test_create_graph(device):
    r = run("create_graph", device)
    assert r.values["g_nodes"] >= 4 and r.values["g_residuals"] >= 3
    assert r.values["err_g"] < 1e-5 and r.values["err_h"] < 1e-5
    assert r.values["retain_requires_grad"] is False and r.values["retained_live"] == 3
    assert "has no graph (requires_grad=False)" in r.facts["with retain_graph=True instead"]


@pytest.mark.parametrize("device", DEVICES)
def test_inplace(device):
    r = run("inplace", device)
    kind = "torch.FloatTensor" if device == "cpu" else "torch.cuda.FloatTensor"
    assert "modified by an inplace operation" in r.error and f"[{kind} [8]]" in r.error
    assert "is at version 1; expected version 0" in r.error
    v = r.values
    assert (v["node"], v["slot"], v["saved_version"], v["version"], v["bumped_by"]) == (
        "SinBackward0", "self", 0, 1, ["add_"]
    )
    # the source line is the user-level program's own `h.add_(1)`, in the scenario's module
    lines, first = inspect.getsourcelines(sc.overwrite_saved)
    add_line = first + next(i for i, line in enumerate(lines) if "h.add_(1)" in line)
    assert r.facts["bumped by"] == f"add_ at inplace.py:{add_line} (version -> 1)"
    assert len(v["fixes"]) == 3
    for diff, h_next_ok in v["fixes"].values():
        assert diff < 1e-6 and h_next_ok
    # the counter counts writes, not changes: a write that restores the value still fails backward
    assert v["restored"] is True and "is at version 2; expected version 0" in v["restored_error"]
    # an overwrite that prints plausible numbers: refused
    assert "is at version 1; expected version 0" in v["clamp_error"]
    # .data skips the check: backward runs and the gradient is silently wrong (it used the new h)
    assert v["data_diff"] > 0.5 and v["data_used_new"] == 0.0
    # views, .detach() and writes under no_grad all bump the shared counter
    assert list(v["shared"].values()) == [1, 1, 1]


@pytest.mark.slow  # ~15 s: the fast tests stay under a minute
@pytest.mark.parametrize("device", DEVICES)
def test_recompute(device):
    r = run("recompute", device)
    rows = r.values["rows"]
    assert r.values["activations"] == sc.DEPTH * sc.BATCH * sc.WIDTH * 4  # one kept output per block
    assert all(row["max_diff"] == 0.0 for row in rows.values())
    plain = rows["plain backward"]["peak"]
    assert plain >= r.values["activations"]
    assert rows["retain_graph + second backward"]["peak"] > plain
    ckpt = next(v for k, v in rows.items() if k.startswith("checkpoint"))
    assert ckpt["peak"] < plain
    # tanh's rule reads its output, which is the next matmul's input: keeping matmul outputs saves nothing
    sac = next(v for k, v in rows.items() if k.startswith("selective"))
    assert sac["peak"] >= plain
    assert len(r.figure().axes[0].patches) == 2 * len(rows)


@pytest.mark.parametrize("device", DEVICES)
def test_offload(device):
    r = run("offload", device)
    rows = r.values["rows"]
    assert all(row["max_diff"] == 0.0 for row in rows.values())
    custom = rows["custom pack/unpack (activations to host)"]
    assert custom["pack_s"] > 0 and custom["unpack_s"] > 0
    if device == "cpu":
        # no copies: a copy would add megabytes (a 4-byte scalar may differ in how the hook packs it)
        assert abs(rows["save_on_cpu"]["device_bytes"] - rows["no hooks"]["device_bytes"]) <= 8
        assert rows["save_on_cpu"]["graph_bytes"] == rows["no hooks"]["graph_bytes"]
        assert custom["device_bytes"] > rows["no hooks"]["device_bytes"]  # copies, in the same memory
        assert "save_on_cpu copies nothing" in r.facts["on a CPU-only machine"]
    else:
        assert rows["save_on_cpu"]["device_bytes"] < rows["no hooks"]["device_bytes"]
        assert rows["save_on_cpu"]["host_bytes_trace"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_app_references(device):
    r = run("app_references", device)
    rows = r.values["rows"]
    assert rows["history.append(val)"]["growth"] > 100 * 1024
    assert rows["history.append(val.item())"]["growth"] == 0
    assert rows["history.append(val.detach())"]["growth"] <= 512
    assert all("identical" in v for k, v in r.facts.items() if k.startswith("history"))
    assert len(r.figure().axes[0].lines) == 3


@pytest.mark.parametrize("device", DEVICES)
def test_storage_evidence(device):
    r = run("storage_evidence", device)
    v = r.values
    assert v["slice_visible"] == 20 and v["slice_pinned"] == 4 * MIB
    assert v["slice_measured"] == v["slice_predicted"]
    assert v["views_count"] == 4 and v["views_storages"] == 1
    assert v["views_naive"] == 2 * N * 4 + 8  # four half-size views + the saved scalar 2
    assert v["views_storage_truth"] == N * 4 + 8
    assert v["views_measured"] == v["views_predicted"]
    if device == "cpu":
        assert v["slice_measured"] == 4 * MIB + 4
        assert v["views_measured"] == N * 4 + 8 + 4


def test_compare_on_cpu_only_machine_is_fixed_text():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    first = tk.compare(sc.retain_graph, devices=("cpu", "cuda"))
    assert first.results["cuda"] is None and first.results["cpu"] is not None
    text = first.text()
    assert NO_CUDA in text and "freed when the graph is dropped (measured)" in text
    assert text == tk.compare(sc.retain_graph, devices=("cpu", "cuda")).text()
    rows = first.rows()
    assert rows[0][1][1] == NO_CUDA and all(cells[1] == "" for _, cells in rows[1:])
    assert "<table>" in first._repr_html_()


def test_device_checks():
    assert check_device("cpu") == torch.device("cpu")
    with pytest.raises(tk.DeviceUnavailableError, match="use 'cpu' or 'cuda'"):
        check_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(tk.DeviceUnavailableError, match="not available"):
            sc.retain_graph("cuda")


@CUDA
def test_compare_cpu_and_cuda_side_by_side():
    comp = tk.compare(sc.inplace, devices=("cpu", "cuda"))
    cells = dict(comp.rows())["backward"]
    assert "torch.FloatTensor" in cells[0] and "torch.cuda.FloatTensor" in cells[1]


def test_scenarios_without_figure_say_so():
    r = sc.repeated_backward()
    with pytest.raises(ValueError, match="reads best as a table"):
        r.figure()
    assert r.text().startswith("repeated_backward on cpu")


def test_lessons_show_the_same_source_the_scenarios_run():
    import nbformat

    root = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
    shown = {
        "03_storage.ipynb": [sc.shared_views],
        "04_retention.ipynb": [sc.exp_times],
        "05_inplace.ipynb": [sc.overwrite_saved],
        "06_app_references.ipynb": [sc.train_and_log],
        "07_hooks_offload.ipynb": [sc.block, sc.segment, sc.mlp_loss],
        "08_recompute.ipynb": [sc.block, sc.segment, sc.save_matmuls, sc.mlp_loss],
    }
    for name, functions in shown.items():
        code = "\n".join(c.source for c in nbformat.read(root / name, as_version=4).cells if c.cell_type == "code")
        for fn in functions:
            assert inspect.getsource(fn).strip() in code, f"{name} must show {fn.__name__} as the scenarios run it"


def test_mlp_loss_variants_give_the_same_gradient():
    x, ws = sc.mlp_inputs(torch.device("cpu"))
    grads = []
    for kwargs in ({}, {"every": 4}, {"every": 2, "policy": sc.save_matmuls}, {"every": 8, "policy": sc.save_matmuls}):
        (g,) = torch.autograd.grad(sc.mlp_loss(x, ws[:3] + ws[:1], **kwargs), ws[0])
        grads.append(g)
    assert all(torch.equal(g, grads[0]) for g in grads)


def test_registry_lists_every_scenario_in_lesson_order_with_its_source():
    assert list(sc.REGISTRY) == NAMES
    for name, entry in sc.REGISTRY.items():
        fn = getattr(sc, name)
        assert entry.name == name and entry.function is fn  # tk.scenarios.NAME is the registered function
        assert fn.__module__ == f"tracekit.scenarios.{name}"  # one module per scenario
        assert entry.description == fn.__doc__.splitlines()[0]
        src = sc.source(name)
        assert src == entry.source() == inspect.getsource(fn)
        assert src.startswith(f"def {name}(device: str = \"cpu\") -> ScenarioResult:")
        assert f"ScenarioResult(\"{name}\"" in src.replace("(\n        ", "(")  # it names its own result
    assert "retain_graph=True" in sc.source("retain_graph") and "h.add_" not in sc.source("retain_graph")
    with pytest.raises(tk.errors.UnknownScenarioError, match="no scenario 'retain': the scenarios are repeated_"):
        sc.source("retain")


def test_each_scenario_module_holds_its_figure_and_is_user_level():
    figures = {"recompute": "recompute_figure", "offload": "offload_figure", "app_references": "references_figure",
               "storage_evidence": "storage_figure"}
    package = pathlib.Path(sc.__file__).parent
    modules = {m.name for m in pkgutil.iter_modules([str(package)])}
    assert modules == set(NAMES) | {"common", "programs"}
    for name in modules:
        module = importlib.import_module(f"tracekit.scenarios.{name}")
        assert module.USER_LEVEL is True, name  # frames.py shows source lines inside it
        if name in figures:
            assert callable(getattr(module, figures[name]))
    from tracekit.render import figures as generic

    assert not any(hasattr(generic, f) for f in figures.values())
    tree = ast.parse(pathlib.Path(generic.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not any("memory_budget" in m or "scenarios" in m or "results" in m for m in imported), imported


def test_generic_figure_helpers():
    from tracekit.render.figures import figure_and_axes, unit

    fig, ax = figure_and_axes(4, 2)
    assert tuple(fig.get_size_inches()) == (4.0, 2.0) and fig.axes == [ax]

    assert unit(MIB - 1) == (1024, "KiB") and unit(MIB) == (MIB, "MiB") and unit(0) == (1024, "KiB")


@pytest.fixture
def global_rng():
    """Leave the global generator as the test found it (the test below seeds it)."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


def test_seeded_models_draw_what_the_three_old_setups_drew(global_rng):
    # the old code, written out: each setup seeded its own generator and drew in this order
    torch.manual_seed(123)  # nn.Linear's default init draws from the global generator: same state for both
    gen = torch.Generator().manual_seed(0)
    x_old = torch.randn(sc.BATCH, sc.WIDTH, generator=gen)
    ws_old = [torch.randn(sc.WIDTH, sc.WIDTH, generator=gen) / sc.WIDTH**0.5 for _ in range(sc.DEPTH)]
    x, ws = sc.mlp_inputs(torch.device("cpu"))
    assert torch.equal(x, x_old) and len(ws) == sc.DEPTH
    assert all(torch.equal(w, o) and w.requires_grad and w.is_leaf for w, o in zip(ws, ws_old))

    torch.manual_seed(123)
    gen = torch.Generator().manual_seed(1)
    old = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
    with torch.no_grad():
        for p in old.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    x_old, x_val_old = torch.randn(64, 128, generator=gen), torch.randn(256, 128, generator=gen)
    after_old = torch.randn(3)
    torch.manual_seed(123)
    model, opt, x, x_val = sc.training_setup("cpu")
    assert torch.equal(torch.randn(3), after_old)  # the global generator advanced exactly as before
    assert [type(m) for m in model] == [type(m) for m in old]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), old.parameters()))
    assert torch.equal(x, x_old) and torch.equal(x_val, x_val_old)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["lr"] == 0.01

    from tracekit.memory_budget import default_setup

    torch.manual_seed(123)
    gen = torch.Generator().manual_seed(0)
    old = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(),
                              torch.nn.Linear(512, 10))
    with torch.no_grad():
        for p in old.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    inputs_old = torch.randn(512, 256, generator=gen)
    targets_old = torch.randint(0, 10, (512,), generator=gen)
    torch.manual_seed(123)
    model, optimizer, (inputs, targets) = default_setup("cpu")
    assert [type(m) for m in model] == [type(m) for m in old]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), old.parameters()))
    assert torch.equal(inputs, inputs_old) and torch.equal(targets, targets_old)
    assert isinstance(optimizer, torch.optim.Adam)


def test_seeded_mlp_variants():
    from tracekit.models import seeded_mlp

    model, gen = seeded_mlp((3, 5, 4, 2), torch.nn.ReLU, scale=2.0, seed=7)
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [tuple(p.shape) for p in model.parameters()] == [(5, 3), (5,), (4, 5), (4,), (2, 4), (2,)]
    ref = torch.Generator().manual_seed(7)
    for p in model.parameters():
        assert torch.equal(p.detach(), torch.randn(p.shape, generator=ref) * 2.0)
    assert torch.equal(torch.randn(4, generator=gen), torch.randn(4, generator=ref))  # where the caller goes on
    single, _ = seeded_mlp((6, 1), torch.nn.Tanh, scale=1.0, seed=7)
    assert [type(m).__name__ for m in single] == ["Linear"]


def test_a_prediction_counts_only_the_storages_on_the_measured_device():
    # lesson 3's program on the meta device: h lives there, the saved Python number 2 is a 0-dim CPU
    # tensor (PyTorch's rule for numbers, on CUDA too), which the device's allocator never sees
    from tracekit.scenarios.common import predicted
    from tracekit.scenarios.programs import shared_views

    tr = tk.trace(shared_views(torch.randn(N, device="meta", requires_grad=True)))
    owned = tr.graph_owned_storages()
    assert sorted((s.device, s.nbytes) for s in owned) == [("cpu", 8), ("meta", N * 4)]
    assert predicted(owned, "meta") == N * 4 and predicted(owned, "cpu") == 8
    assert predicted(owned, "cuda") == predicted(owned, "cuda:1") == 0
