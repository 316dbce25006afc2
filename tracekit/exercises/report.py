"""What `tk.check` returns: the per-question results, shown once as the score report."""

from __future__ import annotations

import html


class CheckReport(list):
    """The judged questions (a list of dicts: name, score, max_score, message, status), displayed in
    a notebook as one report — the total, a line per question, what to fix — never as a raw list."""

    def __init__(self, exercise_id: str, title: str, results: list[dict], max_score: float, note: str = "") -> None:
        super().__init__(results)
        self.exercise_id, self.title, self.max_score, self.note = exercise_id, title, max_score, note

    @property
    def score(self) -> float:
        """Points scored in this check."""
        return round(sum(q["score"] for q in self), 2)

    def text(self) -> str:
        """The report as plain text."""
        from . import score_text

        body = score_text(self.exercise_id, self.title, self.score, self.max_score, list(self))
        return body + (f"\n{self.note}" if self.note else "")

    def __repr__(self) -> str:
        return self.text()

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.text())}</pre>"
