"""tracekit: see which forward values reverse-mode autodiff keeps, and for how long."""

from .capture import build_trace, capture, trace
from .errors import NestedCaptureError, NoHistoryError, NotATensorError, NotObservableError, TracekitError
from .model import Node, Residual, Step, Storage, Trace
from .rules import RULES

__all__ = [
    "RULES", "Node", "NestedCaptureError", "NoHistoryError", "NotATensorError", "NotObservableError",
    "Residual", "Step", "Storage", "Trace", "TracekitError", "build_trace", "capture", "trace",
]
__version__ = "0.1.0"
