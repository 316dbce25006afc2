"""tracekit: see which forward values reverse-mode autodiff keeps, and for how long."""

from . import formula, scenarios, transformer  # issue 15: the paper's formula, GPT / Llama blocks
from .build import build_trace
from .diff import TraceDiff, checkpoint_cache, diff
from .errors import NestedCaptureError, NoHistoryError, NotATensorError, NotObservableError, TracekitError
from .exercises import check
from .explain import explain
from .lab import SigmoidLab, lab
from .memory import DeviceUnavailableError, Measurement, measure
from .memory_budget import Budget, budget
from .model import Mutation, Node, Residual, Step, Storage, Trace
from .predict import Prediction
from .record import capture, trace
from .results import Comparison, ScenarioResult, compare
from .rules import RULES
from .storage import format_bytes

__all__ = [
    "RULES",
    "SigmoidLab",
    "lab",
    "Budget",
    "budget",
    "Comparison",
    "DeviceUnavailableError",
    "Measurement",
    "Mutation",
    "NestedCaptureError",
    "NoHistoryError",
    "Node",
    "NotATensorError",
    "NotObservableError",
    "Residual",
    "ScenarioResult",
    "Step",
    "Storage",
    "Trace",
    "TracekitError",
    "build_trace",
    "capture",
    "check",
    "compare",
    "format_bytes",
    "measure",
    "scenarios",
    "trace",
    "explain",  # issue 30
    "diff",  # issue 15
    "TraceDiff",
    "checkpoint_cache",
    "Prediction",
    "formula",
    "transformer",
]
__version__ = "0.1.0"
