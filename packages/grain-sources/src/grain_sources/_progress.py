"""A one-line progress display on stderr for long writes."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Short jobs print nothing; a line appears only once a job has run this long.
_QUIET_SECONDS = 2.0
_EVERY_SECONDS = 0.5


class Progress:
    """Counts records and bytes; redraws ``label: N records, X MB, R records/s``."""

    def __init__(self, label: str, enabled: bool | None = None, stream: TextIO | None = None):
        self._stream = sys.stderr if stream is None else stream
        if enabled is None:
            enabled = bool(getattr(self._stream, "isatty", lambda: False)())
        self._enabled = enabled
        self._label = label
        self._start = self._last = time.perf_counter()
        self._shown = False
        self.records = 0
        self.bytes = 0

    def add(self, size: int) -> None:
        self.records += 1
        self.bytes += size
        if self._enabled and not self.records & 255:
            now = time.perf_counter()
            if now - self._start >= _QUIET_SECONDS and now - self._last >= _EVERY_SECONDS:
                self._last = now
                self._draw(now, end="")

    def _draw(self, now: float, end: str) -> None:
        rate = self.records / max(now - self._start, 1e-9)
        self._stream.write(
            f"\r{self._label}: {self.records:,} records, {self.bytes / 1e6:,.1f} MB, "
            f"{rate:,.0f} records/s{end}"
        )
        self._stream.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            self._draw(time.perf_counter(), end="\n")
