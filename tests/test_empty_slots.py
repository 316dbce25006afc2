"""The slots PyTorch's generated code leaves empty (derivatives.saved_for_one_input, torchgen's
`guard_for`): a tensor only one input's gradient reads is saved only when that input gets one. The
build skips reading them; these tests hold the rule against real nodes, and the record against one
built reading every slot."""

import itertools

import pytest
import torch

import tracekit as tk
from tracekit import build, derivatives


def _ops() -> dict[str, tuple]:
    """op -> (its function, the shapes of its tensor inputs): one op per guarded node type we can make."""
    mm, vec, bat = (3, 4), (4,), (2, 3, 3)
    return {
        "mul": (torch.mul, [(3,), (3,)]),
        "div": (lambda a, b: a / (b.abs() + 1), [(3,), (3,)]),
        "mm": (torch.mm, [(2, 3), (3, 4)]),
        "bmm": (torch.bmm, [bat, bat]),
        "mv": (torch.mv, [mm, vec]),
        "dot": (torch.dot, [vec, vec]),
        "vdot": (torch.vdot, [vec, vec]),
        "addmm": (torch.addmm, [(2, 4), (2, 3), (3, 4)]),
        "addmv": (torch.addmv, [(3,), mm, vec]),
        "addr": (torch.addr, [mm, (3,), vec]),
        "baddbmm": (torch.baddbmm, [bat, bat, bat]),
        "addbmm": (torch.addbmm, [(3, 3), bat, bat]),
        "addcmul": (torch.addcmul, [(3,), (3,), (3,)]),
        "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1), [(3,), (3,), (3,)]),
        "lerp": (torch.lerp, [(3,), (3,), (3,)]),
        "hypot": (torch.hypot, [(3,), (3,)]),
        "copysign": (torch.copysign, [(3,), (3,)]),
        "cross": (lambda a, b: torch.linalg.cross(a, b), [(2, 3), (2, 3)]),
        "fmod": (lambda a, b: torch.fmod(a, b.abs() + 1), [(3,), (3,)]),
        "remainder": (lambda a, b: torch.remainder(a, b.abs() + 1), [(3,), (3,)]),
        "complex": (torch.complex, [(3,), (3,)]),
        "index_add": (lambda a, s: a.index_add(0, torch.tensor([0, 2]), s), [(3, 2), (2, 2)]),
        "index_copy": (lambda a, s: a.index_copy(0, torch.tensor([0, 2]), s), [(3, 2), (2, 2)]),
        "scatter_add": (lambda a, s: a.scatter_add(0, torch.tensor([[0, 1], [2, 0]]), s), [(3, 2), (2, 2)]),
        "masked_scatter": (lambda a, s: a.masked_scatter(torch.tensor([True, False, True]), s), [(3,), (3,)]),
        "slice_scatter": (lambda a, s: torch.slice_scatter(a, s, 0, 0, 2), [(4, 2), (2, 2)]),
        "select_scatter": (lambda a, s: torch.select_scatter(a, s, 0, 1), [(3, 2), (2,)]),
        "diagonal_scatter": (lambda a, s: torch.diagonal_scatter(a, s), [(3, 3), (3,)]),
    }


def _patterns(n: int) -> list[tuple[bool, ...]]:
    return [p for p in itertools.product((True, False), repeat=n) if any(p)]


def _graph(op: str, pattern: tuple[bool, ...]) -> torch.Tensor:
    fn, shapes = _ops()[op]
    torch.manual_seed(0)
    args = [torch.randn(*s, requires_grad=g) for s, g in zip(shapes, pattern)]
    return fn(*args)


CASES = [(op, p) for op, (_, shapes) in _ops().items() for p in _patterns(len(shapes))]


@pytest.mark.parametrize("op,pattern", CASES, ids=[f"{op}-{''.join('gc'[not g] for g in p)}" for op, p in CASES])
def test_the_rule_says_which_slots_are_empty_on_real_nodes(op: str, pattern: tuple[bool, ...]) -> None:
    node = _graph(op, pattern).grad_fn
    needs = tuple(n is not None for n, _ in node.next_functions)
    guards = derivatives.saved_for_one_input(node.name())
    for slot, k in guards.items():
        if not hasattr(node, f"_saved_{slot}"):
            continue  # a tensor torchgen saves as metadata only (zeros_like(values)): no slot
        value = getattr(node, f"_saved_{slot}")
        assert (value is not None) == needs[k], (node.name(), slot, k, needs)


def test_the_ops_made_cover_the_guarded_node_types_of_the_common_ops() -> None:
    names = {_graph(op, (True,) * len(shapes)).grad_fn.name() for op, (_, shapes) in _ops().items()}
    guarded = {name for name in names if derivatives.saved_for_one_input(name)}
    assert {"MulBackward0", "DivBackward0", "MmBackward0", "AddmmBackward0", "AddcmulBackward0", "LerpBackward1",
            "BmmBackward0", "IndexAddBackward0", "ScatterAddBackward0"} <= guarded
    assert len(guarded) >= 24, sorted(names - guarded)


def test_the_light_lookup_finds_what_the_whole_table_says() -> None:
    table = derivatives.table()
    derivatives.table.cache_clear()  # entry() reads the whole table once it is read: read its own way
    try:
        for name in ("MulBackward0", "MulBackward1", "AddmmBackward0", "LerpBackward1", "ConvolutionBackward0",
                     "NativeLayerNormBackward0", "IndexPutBackward0", "SafeSoftmaxBackward0", "EqBackward1"):
            assert derivatives.entry(name) == table[name]
        assert all(derivatives.entry(name) == d for name, d in table.items())
        assert derivatives.entry("NotANodeBackward0") is None
        assert derivatives.entry("torch::autograd::CopySlices") is None
    finally:
        derivatives.table.cache_clear()


def test_the_rule_follows_torchgen_where_a_tensor_is_read_only_for_its_metadata() -> None:
    # mul: self's formula reads other and self.scalar_type() (saved as metadata): self is other's alone
    assert derivatives.saved_for_one_input("MulBackward0") == {"self": 1, "other": 0}
    # div: other is read by both formulas; self by other's alone
    assert derivatives.saved_for_one_input("DivBackward0") == {"self": 1}
    # layer norm: one formula for all inputs; a list among the inputs; one input; a backward of a backward
    for name in ("NativeLayerNormBackward0", "CatBackward0", "ExpBackward0", "ConvolutionBackwardBackward0"):
        assert derivatives.saved_for_one_input(name) == {}


def _every_slot_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(derivatives, "saved_for_one_input", lambda name: {})
    monkeypatch.setattr(build, "_TYPES", {})


def _programs() -> dict[str, object]:
    torch.manual_seed(0)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    c, b = torch.randn(4, 3), torch.randn(5)
    net = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.LayerNorm(6), torch.nn.GELU(), torch.nn.Linear(6, 1))
    return {
        "chain of x * c": lambda: (lambda v: [v := v * 1.0001 for _ in range(40)][-1].sum())(x),
        "c * x and x * c": lambda: ((c * x) + (x * c)).exp().sum(),
        "constant matrices": lambda: (torch.addmm(b, c, w) + c @ w).sum() + (x @ torch.randn(3, 5)).sum(),
        "addcmul / lerp / div": lambda: (torch.addcmul(c, c, x) + torch.lerp(c, x, 0.3) + c / x.exp()).sum(),
        "a model on a constant input": lambda: net(c).sum(),
        "in place on a copy": lambda: (x * 1).mul_(c).sum(),
        "addcmul with only its first input getting a gradient": lambda: torch.addcmul(x, c, c.exp()).sum(),
    }


@pytest.mark.parametrize("name", list(_programs()))
def test_the_record_is_the_one_read_from_every_slot(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    y = _programs()[name]()
    skipped = tk.trace(y).to_json()
    _every_slot_read(monkeypatch)
    assert tk.trace(y).to_json() == skipped


def test_a_rule_that_called_a_held_slot_empty_is_caught_on_the_first_node(monkeypatch: pytest.MonkeyPatch) -> None:
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    y = (x * c).sum()  # saves c (other) for x's gradient: held
    expected = tk.trace(y).to_json()
    monkeypatch.setattr(derivatives, "saved_for_one_input", lambda name: {"other": 1} if name == "MulBackward0" else {})
    monkeypatch.setattr(build, "_TYPES", {})
    tr = tk.trace(y)
    assert [r.slot for r in tr.residuals] == ["other"] and tr.to_json() == expected


def test_a_hook_set_by_hand_on_the_held_slot_is_still_seen() -> None:
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    y = (x * c).sum()
    node = y.grad_fn.next_functions[0][0]
    unpacked = []
    node._raw_saved_other.register_hooks(lambda t: t, lambda t: unpacked.append(1) or t)
    tr = tk.trace(y)
    assert [r.slot for r in tr.residuals] == ["other"] and not unpacked  # read without unpacking through the hook
    assert tr.residuals[0].hook is not None


def test_each_entry_read_from_plain_lines_is_what_yaml_reads() -> None:
    yaml = pytest.importorskip("yaml")
    texts = [t for ts in derivatives._entries_by_prefix().values() for t in ts]
    plain = 0
    for text in texts:
        entry = derivatives.simple_entry(text)
        if entry is None:
            continue
        plain += 1
        (read,) = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        assert entry == {k: v if isinstance(v, str) else repr(v) for k, v in read.items()}, text
    assert plain > len(texts) // 2  # most entries: the rest are read as YAML
    assert derivatives.simple_entry("- name: f(Tensor self) -> Tensor\n  self: 'quoted'\n") is None
    assert derivatives.simple_entry("- name: f(Tensor self) -> Tensor\n  output_differentiability: [True]\n") is None
    assert derivatives.simple_entry("- name: f(Tensor self) -> Tensor\n  self: grad\n    * 2\n") is None
    assert derivatives.simple_entry("- name: f(Tensor self) -> Tensor\n  flag: true\n") is None
    assert derivatives.simple_entry("- name: f(Tensor self) -> Tensor  # a comment\n  self: grad\n") is None


def _torchgen_guards() -> dict[str, dict[str, int | None]]:
    """node -> saved input -> the edge torchgen's generated code guards its save on (gen_variable_type.py's
    guard_for, from load_derivatives' own DifferentiabilityInfo; None: saved whatever gets a gradient, or
    on a condition over several edges), for the Default nodes of the installed torch."""
    import os

    import torchgen
    from torchgen.api.types import BaseCType, tensorT
    from torchgen.model import ListType, OptionalType
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    base = os.path.join(os.path.dirname(torchgen.__file__), "packaged")
    infos, _ = load_derivatives(os.path.join(base, "autograd", "derivatives.yaml"),
                                os.path.join(base, "ATen", "native", "native_functions.yaml"),
                                os.path.join(base, "ATen", "native", "tags.yaml"))

    def is_list(t: object) -> bool:
        t = t.elem if isinstance(t, OptionalType) else t
        return isinstance(t, ListType)

    out: dict[str, dict[str, int | None]] = {}
    for by_key in infos.values():
        info = by_key.get("Default")
        if info is None or info.op is None:
            continue
        names = [a.name for a in info.args_with_derivatives]
        guards: dict[str, int | None] = {}
        for arg in info.all_saved_inputs:
            if arg.nctype.type != BaseCType(tensorT):
                continue
            name = str(arg.nctype.name)
            used_in = [d for d in info.derivatives if arg in d.saved_inputs]
            plain = (not any(is_list(a.type) for a in info.args_with_derivatives) and "backward" not in info.name
                     and len(names) > 1 and len(used_in) == 1 and len(used_in[0].var_names) == 1)
            guards[name] = names.index(used_in[0].var_names[0]) if plain else None
        out[info.op] = guards
    return out


@pytest.mark.slow
def test_every_slot_the_rule_calls_empty_is_one_torchgen_guards_on_that_input() -> None:
    pytest.importorskip("torchgen.packaged.autograd.load_derivatives")
    torchgen_guards = _torchgen_guards()
    named = agreed = 0
    for node in derivatives.table():
        ours = derivatives.saved_for_one_input(node)
        theirs = torchgen_guards.get(node, {})
        for slot, k in ours.items():
            named += 1
            # the slot exists (torchgen saves the tensor) and its save is guarded on the same input
            assert slot in theirs and theirs[slot] == k, (node, slot, k, theirs)
            agreed += 1
    assert named == agreed and named >= 50


def test_a_rule_that_cannot_be_read_reads_every_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    y = (x * c).exp().sum()
    expected = tk.trace(y).to_json()

    def unreadable(name: str) -> dict[str, int]:
        raise ValueError("a derivatives.yaml this code cannot read")

    monkeypatch.setattr(derivatives, "saved_for_one_input", unreadable)
    monkeypatch.setattr(build, "_TYPES", {})
    assert tk.trace(y).to_json() == expected


def test_the_rule_is_asked_once_per_pattern_even_when_it_leaves_no_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    rule = derivatives.saved_for_one_input
    monkeypatch.setattr(derivatives, "saved_for_one_input", lambda name: asked.append(name) or rule(name))
    monkeypatch.setattr(build, "_TYPES", {})
    x, c1, c2 = torch.randn(3, requires_grad=True), torch.randn(3), torch.randn(3)
    y = x
    for _ in range(20):  # addcmul(x, c1, c2) with only x getting a gradient: both saved slots empty
        y = torch.addcmul(y, c1, c2)
    tr = tk.trace(y.sum())
    assert asked == ["AddcmulBackward0"] and len(tr.residuals) == 0
