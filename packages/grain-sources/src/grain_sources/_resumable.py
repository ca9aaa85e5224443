"""What the resumable sequential readers (TFRecord, Parquet) share: their file's life cycle.

A reader opens its file lazily in `_file`, closes it in `close()` (a later
read reopens it at the saved position), works as a context manager, and, like
a generator, releases the file without a warning when it is garbage collected.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R", bound="ResumableReader[Any]")


class ResumableReader(Iterator[T]):
    """Base of the readers whose position can be saved: `_file` plus `close()`."""

    _file: Any = None

    def close(self) -> None:
        """Closes the file (idempotent); a later read reopens it at the saved position."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __enter__(self: R) -> R:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        file = self.__dict__.get("_file")
        if file is not None:
            file.close()
