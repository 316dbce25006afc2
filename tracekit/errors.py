"""Every error tracekit raises on purpose: each says what went wrong and what to do instead."""


class TracekitError(Exception):
    """Base class of every error tracekit raises on purpose."""


# tracing and observing
class NotATensorError(TracekitError, TypeError):
    """Something that is not a torch.Tensor was given where a tensor is needed."""


class NoHistoryError(TracekitError, ValueError):
    """The tensor has no autograd history, so there is no reverse trace to show."""


class NestedCaptureError(TracekitError, RuntimeError):
    """A tk.capture() block was opened inside another one."""


class NotObservableError(TracekitError, RuntimeError):
    """The trace cannot run or observe backward (for example: built with no outputs)."""


class NoStorageError(TracekitError, RuntimeError):
    """The graph's saved values have no storage to read (a graph built inside a torch.func transform)."""


class GraphReleasedError(TracekitError, RuntimeError):
    """The trace's graph is gone: the caller let go of the traced outputs, or the trace was loaded."""


class MissingCapabilityError(TracekitError, RuntimeError):
    """This torch lacks a private internal tracekit needs and has no public fallback (internals.py)."""


class TraceFormatError(TracekitError, ValueError):
    """A trace file cannot be read: not a tracekit trace, or written in another format version."""


class TraceFileError(TracekitError, OSError):
    """A trace file cannot be written or read where it was asked for: a folder given for a file, a
    file in the way of a folder, or no such file."""


# measuring, comparing, drawing
class DeviceUnavailableError(TracekitError, RuntimeError):
    """The requested device is not present here."""


class BudgetInputError(TracekitError, TypeError):
    """budget() was given a model, batch, loss or step it cannot run."""


class DiffError(TracekitError, ValueError):
    """The two things given to tk.diff cannot be compared."""


class TableArgumentError(TracekitError, ValueError):
    """A table was asked for a sort or a row count it does not have."""


class UnknownScenarioError(TracekitError, KeyError):
    """No scenario has that name (tk.scenarios.REGISTRY lists them)."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


class RenderError(TracekitError, RuntimeError):
    """Graphviz could not turn the drawing into SVG."""


# exercises and grading
class UnknownExerciseError(TracekitError, KeyError):
    """No exercise has that id (tk.exercises.IDS lists them)."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


class AnswerError(TracekitError):
    """The answer cannot be checked (missing, wrong kind): the message says what to do."""


class SubmissionError(TracekitError, ValueError):
    """The file cannot be graded as a notebook (empty, corrupt, too big, not a regular file, or
    no recognisable exercise): the message says what to fix."""


class IsolationError(TracekitError, RuntimeError):
    """The machine cannot isolate submissions as this run requires: the message says what to do."""


class AutograderError(TracekitError, RuntimeError):
    """The autograder bundle cannot be built here (for example: not a source checkout of tracekit)."""


class JudgesMissingError(TracekitError, RuntimeError):
    """Grading needs the instructor's judges, which a student's install does not carry."""


class GradebookError(TracekitError, ValueError):
    """The results cannot be merged into one gradebook (a student graded twice with different scores,
    an unknown exercise in the assignment): the message says what to do."""


class GradesConflictError(GradebookError):
    """Results folders list one student twice with different scores: the message names both."""


class CourseError(TracekitError):
    """The course cannot be copied or opened there (a file in the way, no permission, no course found)."""


class ModuleNotInTraceError(TracekitError, KeyError):
    """A module path that made no op of the trace (tr.draw_module)."""
