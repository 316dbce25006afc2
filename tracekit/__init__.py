"""tracekit: see which forward values reverse-mode autodiff keeps, and for how long."""

from . import formula, scenarios, transformer  # issue 15: the paper's formula, GPT / Llama blocks
from .build import build_trace
from .capture import capture, trace
from .cost import OpCount, count_ops, cpu_ms
from .diff import TraceDiff, checkpoint_cache, diff
from .errors import (
    GraphReleasedError,
    MissingCapabilityError,
    NestedCaptureError,
    NoHistoryError,
    NoStorageError,
    NotATensorError,
    NotObservableError,
    TraceFileError,
    TraceFormatError,
    TracekitError,
)
from .exercises import check
from .explain import explain
from .lab import SigmoidLab, lab
from .lifetimes import Lifetime, Lifetimes
from .memory import DeviceUnavailableError, Measurement, measure
from .memory_budget import Budget, budget
from .reader import Node, Residual, Step, Storage
from .render.prediction import Prediction
from .results import Comparison, ScenarioResult, compare
from .rows import Mutation, Record
from .rules import RULES
from .storage import format_bytes
from .trace import Trace, load_trace

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
    "NoStorageError",
    "Node",
    "NotATensorError",
    "NotObservableError",
    "Residual",
    "ScenarioResult",
    "Step",
    "Storage",
    "Trace",
    "TracekitError",
    "OpCount",
    "build_trace",
    "count_ops",
    "cpu_ms",
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
    "GraphReleasedError",
    "MissingCapabilityError",
    "TraceFileError",
    "TraceFormatError",
    "Lifetime",
    "Lifetimes",
    "Record",
    "load_trace",
    "formula",
    "transformer",
]
__version__ = "0.1.0"
