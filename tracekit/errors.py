"""Errors tracekit raises: each says what went wrong and what to do instead."""


class TracekitError(Exception):
    """Base class of every error tracekit raises on purpose."""


class NotATensorError(TracekitError, TypeError):
    """Something that is not a torch.Tensor was given where a tensor is needed."""


class NoHistoryError(TracekitError, ValueError):
    """The tensor has no autograd history, so there is no reverse trace to show."""


class NestedCaptureError(TracekitError, RuntimeError):
    """A tk.capture() block was opened inside another one."""


class NotObservableError(TracekitError, RuntimeError):
    """The trace cannot run or observe backward (for example: built with no outputs)."""
