"""What `tk.check` returns: the per-question entries (still a list of dicts, one per question) with the
total, shown once as one report — in a notebook as the cell's output, in a script printed."""

from __future__ import annotations

import html
import sys
from typing import Any


class CheckReport(list):
    """The judged questions of one self-check (each a dict: name, score, max_score, prompt, message,
    ...), with `exercise`, `title`, `score` and `max_score`; displays as the report, not as a raw list."""

    def __init__(self, exercise: str, title: str, max_score: float, questions: list[dict[str, Any]],
                 note: str = "") -> None:
        super().__init__(questions)
        self.exercise, self.title, self.max_score, self.note = exercise, title, max_score, note
        self.shown = False  # set once a notebook displayed it

    @property
    def score(self) -> float:
        """The points of every question together."""
        return round(sum(q["score"] for q in self), 2)

    def text(self) -> str:
        """The report as text (what `tracekit check` prints too)."""
        from . import score_text

        body = score_text(self.exercise, self.title, self.score, self.max_score, list(self))
        return body + (f"\n{self.note}" if self.note else "")

    def __repr__(self) -> str:
        return self.text()

    __str__ = __repr__

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        self.shown = True
        p.text(self.text())

    def _repr_html_(self) -> str:
        self.shown = True
        head, *rest = self.text().splitlines()
        body = html.escape("\n".join(rest))
        return (f"<div class='tracekit-check'><b>{html.escape(head)}</b>"
                f"<pre style='margin:4px 0 0 0;white-space:pre-wrap;word-break:normal;overflow-wrap:normal'>"
                f"{body}</pre></div>")  # lines wrap between words, never inside one (JupyterLab's default breaks any)


def _ipython() -> Any:
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return get() if get is not None else None


def deliver(report: CheckReport) -> CheckReport:
    """Show `report` exactly once: outside IPython print it now; in IPython (a notebook) let the cell
    display it when it is the cell's value, and display it when the cell ends if it was not."""
    shell = _ipython()
    if shell is None or not hasattr(shell, "events"):
        print(report.text())
        return report

    def at_cell_end() -> None:
        shell.events.unregister("post_execute", at_cell_end)
        if not report.shown:
            from IPython.display import display

            display(report)

    shell.events.register("post_execute", at_cell_end)
    return report
