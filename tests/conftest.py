import pytest
import torch
from jupyterlab_page import ROOT, jupyterlab


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """A real JupyterLab on a copy of the lessons, isolated from this machine (jupyterlab_page.py)."""
    with jupyterlab(tmp_path_factory.mktemp("lab"), ROOT / "notebooks") as server:
        yield server


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory):
    """The built wheel installed in a new venv (tests/wheel_env.py): its python and the wheel."""
    from wheel_env import build_wheel, make_venv

    folder = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(folder)
    return {"python": make_venv(folder / "venv", wheel), "wheel": wheel, "root": folder}
