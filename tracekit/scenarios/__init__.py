"""Lifetime scenarios: small real PyTorch programs that tracekit runs, observes and explains.

Each scenario takes `device=` ("cpu" or "cuda") and returns a ScenarioResult; run one on
several devices side by side with `tk.compare(scenario, devices=("cpu", "cuda"))`. One module
per scenario holds its function and its figure; `REGISTRY` lists them in lesson order, and
`source(name)` gives a scenario's source for a lesson to show.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UnknownScenarioError
from ..results import ScenarioResult
from .app_references import ITERATIONS, KEEPS, app_references, train_and_log, training_setup
from .common import N
from .create_graph import create_graph
from .inplace import inplace, overwrite_saved
from .offload import offload
from .programs import (
    BATCH,
    DEPTH,
    MODEL,
    SEGMENT,
    WIDTH,
    block,
    exp_times,
    mlp_inputs,
    mlp_loss,
    save_matmuls,
    segment,
    shared_views,
)
from .recompute import recompute
from .repeated_backward import repeated_backward
from .retain_graph import retain_graph
from .storage_evidence import storage_evidence


@dataclass(frozen=True)
class Scenario:
    """One registered scenario: its name, the function that runs it, and what it shows in one line."""

    name: str
    function: Callable[..., ScenarioResult]
    description: str

    def __call__(self, device: str = "cpu") -> ScenarioResult:
        """Run the scenario on this device."""
        return self.function(device=device)

    def source(self) -> str:
        """The scenario function's source code, as the lessons show it."""
        return inspect.getsource(self.function)


def _registered(*functions: Callable[..., ScenarioResult]) -> dict[str, Scenario]:
    return {f.__name__: Scenario(f.__name__, f, inspect.getdoc(f).splitlines()[0]) for f in functions}


REGISTRY: dict[str, Scenario] = _registered(
    repeated_backward, retain_graph, create_graph, inplace, recompute, offload, app_references, storage_evidence,
)


def source(name: str) -> str:
    """The source code of the scenario named `name` (a key of REGISTRY)."""
    if name not in REGISTRY:
        raise UnknownScenarioError(f"no scenario {name!r}: the scenarios are {', '.join(REGISTRY)}")
    return REGISTRY[name].source()


__all__ = [
    "BATCH", "DEPTH", "ITERATIONS", "KEEPS", "MODEL", "N", "REGISTRY", "SEGMENT", "WIDTH", "Scenario",
    "app_references", "block", "create_graph", "exp_times", "inplace", "mlp_inputs", "mlp_loss", "offload",
    "overwrite_saved", "recompute", "repeated_backward", "retain_graph", "save_matmuls", "segment", "shared_views",
    "source", "storage_evidence", "train_and_log", "training_setup",
]
