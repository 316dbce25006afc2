"""A progress line for long traces, on stderr (a terminal and Jupyter both show it); no dependencies."""

from __future__ import annotations

import sys
import time
from typing import TextIO

AUTO_AFTER_S = 2.0  # progress=None shows the line only once a trace has taken this long


class Progress:
    """`p = Progress(total, "tracing"); p.update(i); p.close()`: a bar on stderr.

    `enabled=True` always draws, `False` never, `None` draws once `AUTO_AFTER_S` have passed,
    so short traces print nothing (notebook outputs stay the same from run to run)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None, stream: TextIO | None = None,
                 width: int = 30) -> None:
        self.total, self.label, self.enabled, self.width = max(total, 1), label, enabled, width
        self.stream = stream
        self.start = time.perf_counter()
        self.shown = False
        self._next = 0  # the next item count at which the line is redrawn (about 100 redraws in all)

    def update(self, done: int) -> None:
        """Say that `done` of `total` items are finished (cheap when nothing needs drawing)."""
        if done < self._next or self.enabled is False:
            return
        self._next = done + max(1, self.total // 100)
        if self.enabled is None and time.perf_counter() - self.start < AUTO_AFTER_S:
            return
        self._draw(done)

    def _draw(self, done: int) -> None:
        stream = self.stream or sys.stderr
        filled = self.width * done // self.total
        seconds = time.perf_counter() - self.start
        bar = "#" * filled + "-" * (self.width - filled)
        stream.write(f"\r{self.label} [{bar}] {done:,}/{self.total:,} ({seconds:.1f} s)")
        stream.flush()
        self.shown = True

    def close(self) -> None:
        """Finish the line (only if one was drawn)."""
        if self.enabled or self.shown:
            self._draw(self.total)
            (self.stream or sys.stderr).write("\n")
