"""The package's shape: imports run one way (down the layers below), errors live in errors.py,
and each module named in docs/architecture.md exists. Read from the source with `ast`: every
import counts, at module level, under `if TYPE_CHECKING:` and inside functions alike (there are no
lazy façades: `Trace` in trace.py stands above the views it calls)."""

import ast
import inspect
from pathlib import Path

import pytest

import tracekit
from tracekit import errors

PACKAGE = Path(tracekit.__file__).parent

# lowest first: a module may import only from a lower layer (or, inside a subpackage, its siblings)
LAYERS: list[set[str]] = [
    {"errors", "derivatives"},
    {"internals"},
    {"storage", "rules", "keeper", "progress", "models", "transformer", "cost", "render", "render.figures",
     "serve", "course_history"},
    {"rows", "memory", "render.svg", "course"},
    {"lifetimes", "live"},
    {"predict", "saved", "frames"},
    {"reader"},
    {"without_data", "render.table", "render.dot", "render.overview", "render.prediction", "render.timeline",
     "trace_format",
     "observe"},
    {"trace"},
    {"build", "results"},
    {"capture"},
    {"diff", "formula", "lab", "memory_budget", "scenarios", "explain"},
    {"exercises", "grading", "cli", "__main__", ""},
]


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int:
    for name in (module, module.split(".")[0]):  # the module itself, else its top package
        for i, layer in enumerate(LAYERS):
            if name in layer:
                return i
    raise AssertionError(f"tracekit.{module} is in no layer: add it to LAYERS and docs/architecture.md")


def _imports(path: Path) -> set[str]:
    """tracekit modules imported anywhere in the file (module level, `if TYPE_CHECKING:`, functions)."""
    module = _name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            if node.module:
                found.add(".".join([*base, node.module]))
            else:  # `from .. import x`: a submodule x, or a name defined in the package itself
                for a in node.names:
                    sub = PACKAGE.joinpath(*base, a.name)
                    found.add(".".join([*base, a.name]) if sub.with_suffix(".py").exists() or sub.is_dir()
                              else ".".join(base))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tracekit."):
            found.add(node.module.removeprefix("tracekit."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("tracekit.") for a in node.names if a.name.startswith("tracekit."))
    return {m for m in found if m != module}


SOURCES = sorted(PACKAGE.rglob("*.py"))


def _violations(module: str, deps: set[str]) -> list[str]:
    """The imports of `module` that run back up (or sideways) the layers."""
    mine, top = _layer(module), len(LAYERS) - 1
    bad = []
    for dep in sorted(deps):
        inside = dep.startswith(module + ".") or ("." in module and dep.split(".")[0] == module.split(".")[0])
        if not inside and not (_layer(dep) < mine or (mine == top and _layer(dep) <= mine)):
            bad.append(f"tracekit.{module} (layer {mine}) imports tracekit.{dep} (layer {_layer(dep)})")
    return bad


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: _name(p) or "tracekit")
def test_no_import_runs_back_up(path: Path) -> None:
    assert _violations(_name(path), _imports(path)) == []


def test_the_layer_check_catches_upward_and_sideways_imports() -> None:
    """The check above is not vacuous."""
    assert _violations("reader", {"trace"}) and _violations("saved", {"frames"})
    assert _violations("render.dot", {"trace"}) and _violations("observe", {"render.table"})
    assert _violations("build", {"render.table"}) == [] and _violations("scenarios.inplace", {"scenarios.common"}) == []
    assert _imports(PACKAGE / "build.py") >= {"trace", "rows", "saved", "frames", "rules"}
    assert "render.svg" in _imports(PACKAGE / "render" / "dot.py")  # an import inside a function counts


def test_every_tracekit_error_is_defined_in_errors_py() -> None:
    defined_elsewhere = []
    for path in SOURCES:
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (node.name.endswith("Error") or any(
                    getattr(b, "id", getattr(b, "attr", "")) == "TracekitError" for b in node.bases)):
                defined_elsewhere.append(f"{_name(path)}.{node.name}")
    assert defined_elsewhere == []
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert len(classes) >= 12 and all(issubclass(c, errors.TracekitError) for c in classes)


def test_the_architecture_page_names_every_module() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    wanted = [f"`{p.stem}.py`" for p in SOURCES if p.parent == PACKAGE and not p.stem.startswith("__")]
    wanted += [f"`{p.parent.name}/`" for p in SOURCES if p.name == "__init__.py" and p.parent.parent == PACKAGE]
    assert len(wanted) > 25 and [w for w in wanted if w not in page] == []
