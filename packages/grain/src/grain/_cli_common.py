"""What the `grain` commands share: their errors, a progress bar and number formats."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import numpy as np

# Exit statuses every command keeps (the top-level --help lists them).
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed: a check did not match, a record or stage raised
EXIT_USAGE = 2  # bad usage: a bad option, a missing input path, an input it cannot read
EXIT_INTERRUPTED = 130  # Ctrl-C


class CommandError(Exception):
    """A failure shown as one line on stderr; `code` is the exit status."""

    code = EXIT_FAILED


class UsageError(CommandError):
    """Bad usage found after parsing: a missing path, an input of an unknown format."""

    code = EXIT_USAGE


class ProgressBar:
    """A bar redrawn on one line of stderr, only when stderr is a terminal.

    ``update(done)`` takes the running count; it redraws at most ten times a
    second, so calling it for every element costs a clock read.
    """

    def __init__(
        self, total: int | None, label: str, unit: str = "records", stream: TextIO | None = None
    ):
        self._stream = sys.stderr if stream is None else stream
        self.enabled = bool(getattr(self._stream, "isatty", lambda: False)())
        self._total = total
        self._label = label
        self._unit = unit
        self._start = time.perf_counter()
        self._next_draw = self._start + 0.1  # a first draw would show a meaningless rate
        self._done = 0

    def update(self, done: int) -> None:
        self._done = done
        if self.enabled:
            now = time.perf_counter()
            if now >= self._next_draw:
                self._next_draw = now + 0.1
                self._draw(now)

    def _draw(self, now: float, end: str = "") -> None:
        rate = self._done / max(now - self._start, 1e-9)
        if self._total:
            width = 30
            filled = min(width, width * self._done // self._total)
            bar = (
                f"[{'#' * filled}{'.' * (width - filled)}] "
                f"{self._done:,}/{self._total:,} {self._unit}"
            )
        else:
            bar = f"{self._done:,} {self._unit}"
        self._stream.write(f"\r{self._label} {bar}  {format_rate(rate)}\x1b[K{end}")
        self._stream.flush()

    def close(self) -> None:
        """Draws the final state and ends the line (nothing when not on a terminal)."""
        if self.enabled:
            self._draw(time.perf_counter(), end="\n")
            self.enabled = False


def format_rate(per_second: float, unit: str = "") -> str:
    """``14.3 M/s``, ``25.9 k records/s``, ``810.0 batches/s``."""
    for prefix, scale in (("M", 1e6), ("k", 1e3), ("", 1.0)):
        if per_second >= scale or not prefix:
            break
    space = " " if prefix and unit else ""
    return f"{per_second / scale:.1f} {prefix}{space}{unit}/s"


def format_bytes(size: float) -> str:
    """``512 B``, ``1.5 kB``, ``12.3 MB``, ``1.2 GB`` (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def tree_nbytes(element: Any) -> int:
    """The bytes of the array leaves (numpy, or anything with an int `nbytes`) of a tree."""
    if isinstance(element, dict):
        return sum(tree_nbytes(value) for value in element.values())
    if isinstance(element, list | tuple):
        return sum(tree_nbytes(value) for value in element)
    if isinstance(element, np.ndarray | np.generic):
        return int(element.nbytes)
    nbytes = getattr(element, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else 0
