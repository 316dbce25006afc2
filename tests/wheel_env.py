"""The built wheel in a new virtual environment, the way a student or a hub installs tracekit.

`pip wheel --no-deps` builds the wheel from a clean copy of the checkout (what git tracks, without
build outputs). The new venv gets that wheel and nothing else of this checkout: its other
dependencies (torch, JupyterLab, ...) are this test interpreter's, reused through a .pth file (so
torch is not downloaded again), and the Jupyter data and config they installed under this
environment's prefix (JupyterLab's assets, the widgets' extension, server extensions) are linked into
the new prefix, where pip would have put them. Commands run there with a new HOME, no PYTHONPATH and
a working directory outside the checkout, so nothing of the checkout can be imported.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", ".venv*", "node_modules", "artifacts", "build", "dist", "*.egg-info",
                              "__pycache__", "*.pyc", ".ipynb_checkpoints", ".pytest_cache", ".ruff_cache")


def build_wheel(dest: Path) -> Path:
    """`pip wheel --no-deps` of a clean copy of this checkout into `dest`; the wheel's path."""
    src = dest / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(dest), str(src)], check=True, capture_output=True, text=True)
    shutil.rmtree(src)
    (wheel,) = dest.glob("tracekit-*.whl")
    return wheel


def _reused_site_packages() -> list[str]:
    found = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    found += [p for p in sys.path if p.endswith("site-packages")]
    return list(dict.fromkeys(p for p in found if Path(p).is_dir()))


def without(names: tuple[str, ...], folder: Path) -> list[str]:
    """The reused site-packages as one folder of links that leaves out the distributions `names`
    (their packages and .dist-info): an environment where they are not installed."""
    folder.mkdir(parents=True)
    for site_dir in _reused_site_packages():
        for entry in Path(site_dir).iterdir():
            stem = entry.name.lower().replace("-", "_")
            if not stem.startswith(names) and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return [str(folder)]


def make_venv(folder: Path, wheel: Path, reuse: list[str] | None = None) -> Path:
    """A new venv at `folder` with `wheel` installed (no other dependency installed); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "zz-reuse-test-env.pth").write_text("\n".join(reuse or _reused_site_packages()) + "\n")
    prefixes = dict.fromkeys(Path(p).parents[2] for p in _reused_site_packages())  # PREFIX/lib/pythonX.Y/site-packages
    for part in ("share/jupyter", "etc/jupyter"):  # what the reused packages installed as data files
        _link_tree([prefix / part for prefix in prefixes], folder / part)
    # --ignore-installed: the checkout's own (editable) tracekit, seen through the reused folder, must
    # not stand in for the wheel
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
                    "--disable-pip-version-check", str(wheel)], check=True, capture_output=True, text=True,
                   env=clean_env(folder / "home-install"))
    return python


def _link_tree(sources: list[Path], target: Path) -> None:
    """Link into `target` what the `sources` folders hold: a folder only one of them has is linked
    whole (Jupyter serves static files only from under the linked folder's real path); folders several
    have (etc/jupyter/jupyter_server_config.d) are merged, the first source's entry winning."""
    sources = [s for s in sources if s.exists()]
    if not sources or target.exists() or target.is_symlink():
        return
    if len(sources) == 1 or not all(s.is_dir() for s in sources):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(sources[0])
        return
    target.mkdir(parents=True)
    for name in dict.fromkeys(entry.name for s in sources for entry in s.iterdir()):
        _link_tree([s / name for s in sources], target / name)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This machine's environment with a new HOME and nothing that points into the checkout or at
    another Jupyter setup."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "IPYTHON", "PYTHON", "VIRTUAL_ENV", "XDG_", "PIP_"))}
    return {**env, "HOME": str(home), **extra}
