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
