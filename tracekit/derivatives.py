"""PyTorch's own reverse rules, read from the `derivatives.yaml` that ships inside the installed
torch (`torchgen/packaged/autograd/derivatives.yaml`): the rule for any node the lesson table
(rules.py) does not write out.

Each yaml entry names a forward op's schema and, for the inputs that get a gradient, a C++
formula over the saved inputs and outputs (`self`, `weight`, `result1`, ...). The backward
node's class name is made as torchgen makes it: the op's name in CamelCase, `Backward`, and a
counter per name in file order (`convolution` -> `ConvolutionBackward0`, `max_pool2d_with_indices`
-> `MaxPool2DWithIndicesBackward0`, `_safe_softmax` -> `SafeSoftmaxBackward0`).

The formulas are PyTorch's text: whitespace collapsed, and for display only (`shown`) the branch
for an undefined gradient (`grad.defined() ? F : <empty>`) and the double-backward branch
(`GradMode::is_enabled() ? <differentiable> : F`) are dropped, keeping F. `Derivative.formulas`
keeps the text as written.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

MARK = "PyTorch: "  # the start of a rule taken from derivatives.yaml, in every view
_KEYS = ("name", "dispatch", "output_differentiability", "result")
# torchgen saves `self.sym_sizes()` as `self_sym_sizes` (load_derivatives.py's REPLACEMENTS): a
# formula that reads only a tensor's metadata does not read the tensor
_METADATA = re.compile(r"\b(\w+)(?:\.|->)(sym_sizes|sizes|sym_size|size|sym_strides|strides|options|numel|sym_numel|"
                       r"scalar_type|dim|layout|is_conj|device|dtype|sym_blocksize)\(")
_UNDEFINED = re.compile(r"^grad\.defined\(\) \? (.*) : (?:std::tuple<[^>]*>\(\)|Tensor\(\))$")
_GRADMODE = re.compile(r"^GradMode::is_enabled\(\) \? .* : (\w+\(.*\))$")


@dataclass(frozen=True)
class Derivative:
    """One entry of derivatives.yaml as a backward node sees it."""

    node: str  # the backward node's class name, e.g. ConvolutionBackward0
    op: str  # the forward op, e.g. convolution
    schema: str  # the yaml's `name:` line
    inputs: tuple[str, ...]  # the arguments that get a gradient, in the schema's order (next_functions)
    formulas: tuple[tuple[tuple[str, ...], str], ...]  # (arguments, PyTorch's formula for them)

    def input_rules(self) -> dict[str, str]:
        """input -> its formula for display (`grad_input, grad_weight = ...` share one formula)."""
        of = {name: formula for names, formula in self.formulas for name in names}
        return {name: shown(of[name]) for name in self.inputs}


def shown(formula: str) -> str:
    """A formula as views show it: the branch that runs for a defined, first-order gradient."""
    for pattern in (_UNDEFINED, _GRADMODE):
        m = pattern.match(formula)
        if m:
            formula = m.group(1)
    return formula


def reads_text(formula: str) -> str:
    """The formula with metadata reads (`self.sym_sizes()`) renamed as torchgen saves them
    (`self_sym_sizes`), so a slot name found in it is a tensor the rule reads."""
    return _METADATA.sub(lambda m: f"{m.group(1)}_{m.group(2)}(", formula)


def yaml_path() -> Path:
    """Where the installed torch keeps derivatives.yaml."""
    import torchgen

    return Path(torchgen.__file__).parent / "packaged" / "autograd" / "derivatives.yaml"


def _prefix(name: str) -> str:
    camel = "".join(part.title() for part in name.split("_"))
    return (camel + "Backward").replace("ForwardBackward", "Backward")


def _arguments(schema: str) -> tuple[str, list[str]]:
    """(op name without overload, argument names in order) of a schema line."""
    op, typed = _signature(schema)
    return op, [name for name, _ in typed]


def _signature(schema: str) -> tuple[str, list[tuple[str, str]]]:
    """(op name without overload, (name, type as written) of each argument in order) of a schema line:
    `Tensor? weight=None` -> ("weight", "Tensor?")."""
    m = re.match(r"(\w+)(\.\w+)?\((.*)\)\s*->", schema)
    if m is None:
        return schema.split("(")[0], []
    words = [p.split("=")[0].split() for p in _split(m.group(3))]
    return m.group(1), [(w[-1], " ".join(w[:-1])) for w in words]


def _split(arguments: str) -> list[str]:
    """A schema's argument list split at its top-level commas, the `*` of keyword-only ones left out."""
    depth, part, parts = 0, "", []
    for c in arguments:
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += c
    parts.append(part)
    return [p for p in parts if p.strip() and p.strip() != "*"]


@functools.cache
def table() -> dict[str, Derivative]:
    """Every backward node PyTorch's derivatives.yaml defines (Default dispatch), by class name."""
    import yaml

    return _named(yaml.load(yaml_path().read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def _named(entries: list[dict]) -> dict[str, Derivative]:
    """The yaml's entries as torchgen names their nodes: a counter per class-name prefix, counting the
    entries that have a formula, in file order."""
    counter: dict[str, int] = {}
    out: dict[str, Derivative] = {}
    for entry in entries:
        spec = entry["name"]
        body = entry.get("dispatch", {}).get("Default", {}) if "dispatch" in entry else entry
        op, arguments = _arguments(spec)
        formulas = []
        for key, formula in body.items():
            names = tuple(n.strip() for n in str(key).split(","))
            if key in _KEYS or not all(n in arguments for n in names):
                continue  # a forward derivative (`result: ...`) or not a formula
            text = " ".join(str(formula).split())
            if text.lower() != "non_differentiable":
                formulas.append((names, text))
        if not formulas:
            continue
        prefix = _prefix(op)
        k = counter.get(prefix, 0)
        counter[prefix] = k + 1
        with_grad = {n for names, _ in formulas for n in names}
        node = f"{prefix}{k}"
        out[node] = Derivative(node, op, spec, tuple(a for a in arguments if a in with_grad), tuple(formulas))
    return out


@functools.cache
def _entries_by_prefix() -> dict[str, list[str]]:
    """The yaml's entries as text, by the class-name prefix of their op (`MulBackward`): one entry's
    node is found by reading the few entries of its prefix, not the whole file (~50 ms)."""
    text = yaml_path().read_text()
    starts = [m.start() for m in _ENTRY.finditer(text)]
    found: dict[str, list[str]] = {}
    for start, end in zip(starts, [*starts[1:], len(text)]):
        op = _ENTRY.match(text, start).group(1)  # type: ignore[union-attr]
        found.setdefault(_prefix(op), []).append(text[start:end])
    return found


_ENTRY = re.compile(r"^- name:\s*(\w+)", re.M)
_NODE_NAME = re.compile(r"(\w+Backward)\d+")


def entry(node_name: str) -> Derivative | None:
    """lookup(node_name) from the entries of its prefix alone (the same Derivative): what the build
    asks while a trace is made, where reading the whole yaml would cost more than it saves."""
    if table.cache_info().currsize:  # the whole table is read already
        return lookup(node_name)
    m = _NODE_NAME.fullmatch(node_name)
    if m is None:
        return None
    try:
        texts = _entries_by_prefix().get(m.group(1))
        if not texts:
            return None
        entries = list(map(simple_entry, texts))
        if None in entries:  # an entry plain lines do not tell: read as YAML
            import yaml

            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            entries = [e for text in texts for e in yaml.load(text, Loader=loader)]
        return _named(entries).get(node_name)  # type: ignore[arg-type]
    except (ImportError, OSError):
        return None


def simple_entry(text: str) -> dict[str, str] | None:
    """One yaml entry's keys and values where each is a plain `  key: value` line (most entries: no
    nesting, quoting, lists or continued lines), as YAML reads them; None for any other (read as YAML:
    importing yaml alone costs ~13 ms, paid by a process's first trace)."""
    first, *lines = text.split("\n")
    found = _ENTRY_LINE.match(first)
    if found is None:
        return None
    keys = {"name": found.group(1).strip()}
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pair = _PLAIN_LINE.match(line)
        if pair is None or _NOT_PLAIN.search(pair.group(2)):
            return None
        keys[pair.group(1)] = pair.group(2).strip()
    return keys


_ENTRY_LINE = re.compile(r"- name:\s*([^#'\"][^#]*)$")  # (a comment after it: read as YAML)
_PLAIN_LINE = re.compile(r"^  ([A-Za-z_]\w*(?:, *[A-Za-z_]\w*)*): (.*)$")
# a value YAML would not read as the text itself: quoted, a block, a list or map, an anchor, a comment,
# a number, a boolean or null, or empty
_NOT_PLAIN = re.compile(r"^\s*$|^\s*['\"|>&*!%@`{\[]| #|^\s*(?:[-+.]?\d[\w.+-]*|true|false|yes|no|on|off|null|~)\s*$",
                        re.IGNORECASE)


def saved_for_one_input(node_name: str) -> dict[str, int]:
    """slot -> the input (its place in next_functions) whose gradient alone reads it, as torchgen's
    `guard_for` finds it: PyTorch's generated code saves such a tensor only when that input gets a
    gradient (`x * c` with a constant c saves `c`, not `x`), so its slot is empty otherwise. A slot
    not listed may be saved whichever inputs get a gradient. Where this cannot tell, it lists less than
    torchgen would guard, never more: a tensor is taken as read by every formula that names it once
    the metadata reads torchgen saves apart are taken out (_reads_tensor)."""
    d = entry(node_name)
    if d is None or "backward" in d.schema.split("(")[0] or len(d.inputs) <= 1:
        return {}
    types = dict(_signature(d.schema)[1])
    if any("[]" in types.get(name, "[]") for name in d.inputs):  # a list of tensors among the inputs
        return {}
    guarded = {}
    for name, kind in types.items():
        if not _PLAIN_TENSOR.fullmatch(kind):  # an optional, a list, a tensor written in place, a number
            continue
        used_in = [names for names, formula in d.formulas if _reads_tensor(formula, name)]
        if len(used_in) == 1 and len(used_in[0]) == 1:  # one formula, for one input
            guarded[name] = d.inputs.index(used_in[0][0])
    return guarded


_PLAIN_TENSOR = re.compile(r"Tensor(\(\w+\))?")
# torchgen's REPLACEMENTS (load_derivatives.py): reads of a tensor's metadata it saves as metadata, not
# the tensor (`self.sym_sizes()` -> `self_sym_sizes`). Some of them, each matching no more than torchgen's
# (so a formula is taken to read a tensor at least wherever torchgen saves it for it). Narrower than
# _METADATA on purpose: that one is for display (which rule reads a value), this one for what is saved.
_METADATA_READS = tuple(r"{0}\." + m for m in (
    r"sym_sizes\(\)", r"sym_blocksize\(\)", r"options\(\)", r"sym_size\(-?\w+\)", r"numel\(\)",
    r"sym_numel\(\)", r"scalar_type\(\)", r"dim\(\)", r"sym_strides\(\)", r"layout\(\)", r"is_conj\(\)",
)) + (r"zeros_like\({0}\)", r"to_args_sizes\({0}\)", r"to_args_sizes_symint\({0}\)",
      r"to_args_scalartypes\({0}\)", r"TensorGeometry\({0}\)")


def _reads_tensor(formula: str, name: str) -> bool:
    """Whether torchgen would save the argument `name` itself for this formula: named once its metadata
    reads are taken out (its IDENT_REGEX)."""
    escaped = re.escape(name)
    for pattern in _METADATA_READS:
        formula = re.sub(pattern.format(escaped), "_", formula)
    return re.search(rf"(^|\W){escaped}($|\W)", formula) is not None


def lookup(node_name: str) -> Derivative | None:
    """PyTorch's rule for a backward node (`ConvolutionBackward0`), or None if the yaml has none."""
    try:
        return table().get(node_name)
    except (ImportError, OSError):  # no torchgen or no yaml in this torch build: the node stays undescribed
        return None
