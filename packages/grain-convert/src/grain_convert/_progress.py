"""Progress on stderr: the bar `convert` draws, which the `grain` commands share.

It lives in this layer, not in the `grain` command-line tool, because `convert`
draws it when called from Python too; `grain demo` and `grain bench` take it
from `grain_convert.extension`.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Progress on stderr: a bar redrawn on one line on a terminal, else a line every
    few seconds (a log or a pipe gets a record of progress, not a flood of redraws).

    ``update(done)`` takes the running count; it draws at most ten times a second
    on a terminal and once every `line_interval_s` elsewhere, so calling it for
    every element costs a clock read. Set `enabled` to False to silence it.
    """

    def __init__(
        self,
        total: int | None,
        label: str,
        unit: str = "records",
        stream: TextIO | None = None,
        line_interval_s: float = 5.0,
    ):
        self._stream = sys.stderr if stream is None else stream
        self._terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        self.enabled = True
        self._interval = 0.1 if self._terminal else line_interval_s
        self._total = total
        self._label = label
        self._unit = unit
        self._start = time.perf_counter()
        # A first draw would show a meaningless rate; a short run prints no line at all.
        self._next_draw = self._start + self._interval
        self._drawn = False
        self._done = 0

    def update(self, done: int) -> None:
        self._done = done
        if self.enabled:
            now = time.perf_counter()
            if now >= self._next_draw:
                self._next_draw = now + self._interval
                self._draw(now)

    def _draw(self, now: float, end: str = "") -> None:
        elapsed = max(now - self._start, 1e-9)
        rate = format_rate(self._done / elapsed, self._unit)
        if self._total and self._terminal:
            width = 30
            filled = min(width, width * self._done // self._total)
            bar = (
                f"[{'#' * filled}{'.' * (width - filled)}] "
                f"{self._done:,}/{self._total:,} {self._unit}"
            )
        elif self._total:
            bar = f"{self._done:,}/{self._total:,} {self._unit} ({self._done / self._total:.0%})"
        else:
            bar = f"{self._done:,} {self._unit}"
        if self._terminal:
            self._stream.write(f"\r{self._label} {bar}  {rate}\x1b[K{end}")
        else:
            self._stream.write(f"{self._label.strip()}: {bar}, {rate}, {elapsed:.0f} s\n")
        self._drawn = True
        self._stream.flush()

    def close(self) -> None:
        """Draws the final state: ends the bar's line on a terminal; elsewhere a last
        line, if any was printed."""
        if self.enabled and (self._terminal or self._drawn):
            self._draw(time.perf_counter(), end="\n")
        self.enabled = False


def format_rate(per_second: float, unit: str = "") -> str:
    """``14.3 M/s``, ``25.9 k records/s``, ``810.0 batches/s``."""
    for prefix, scale in (("M", 1e6), ("k", 1e3), ("", 1.0)):
        if per_second >= scale or not prefix:
            break
    space = " " if prefix and unit else ""
    return f"{per_second / scale:.1f} {prefix}{space}{unit}/s"
