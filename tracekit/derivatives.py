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
    m = re.match(r"(\w+)(\.\w+)?\((.*)\)\s*->", schema)
    if m is None:
        return schema.split("(")[0], []
    depth, part, parts = 0, "", []
    for c in m.group(3):
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
    names = [p.split("=")[0].split()[-1] for p in parts if p.strip() and p.strip() != "*"]
    return m.group(1), names


@functools.cache
def table() -> dict[str, Derivative]:
    """Every backward node PyTorch's derivatives.yaml defines (Default dispatch), by class name."""
    import yaml

    entries = yaml.load(yaml_path().read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
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


def lookup(node_name: str) -> Derivative | None:
    """PyTorch's rule for a backward node (`ConvolutionBackward0`), or None if the yaml has none."""
    try:
        return table().get(node_name)
    except (ImportError, OSError):  # no torchgen or no yaml in this torch build: the node stays undescribed
        return None
