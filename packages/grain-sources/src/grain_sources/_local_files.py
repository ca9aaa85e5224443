"""Range reads of local files, for our ArrayRecord reader where array_record is missing.

`RemoteArrayRecordDataSource` reads through a store with `size`, `read`,
`read_many` and `glob`. For object stores that is `ObjectStore` (fsspec, its
event-loop thread, retries). Local files need none of that: `LocalFiles` reads
with ``os.pread`` in the calling thread, so the fallback for free-threaded
CPython (where array-record has no wheel) starts no thread and needs no fsspec,
and a later fork finds no extra thread in the process.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from grain_sources._checks import NoSuchFileError, UnreadableFileError


def _path(url: str) -> str:
    return url.split("://", 1)[1] if url.startswith(("file://", "local://")) else url


class LocalFiles:
    """The store of `RemoteArrayRecordDataSource` for local paths: plain positional reads."""

    protocol = "file"

    def size(self, url: str) -> int:
        """The size of the file `url`, in bytes."""
        path = _path(url)
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            raise NoSuchFileError(f"{url!r} does not exist: pass an existing file.") from None

    def read(self, url: str, offset: int, length: int) -> bytes:
        """The `length` bytes of `url` from byte `offset`."""
        descriptor = os.open(_path(url), os.O_RDONLY)
        try:
            data = os.pread(descriptor, length, offset)
        finally:
            os.close(descriptor)
        if len(data) != length:
            raise UnreadableFileError(
                f"reading bytes {offset}..{offset + length} of {url!r} returned {len(data)} "
                "bytes: the file is shorter than expected (it changed after the source was "
                "created?)."
            )
        return data

    def read_many(
        self, requests: Sequence[tuple[str, int, int]], coalesce_gap: int | None = None
    ) -> list[bytes]:
        """The byte ranges ``(url, offset, length)``, in order (no coalescing: no round trips)."""
        del coalesce_gap
        return [self.read(url, offset, length) for url, offset, length in requests]

    def glob(self, pattern: str) -> list[str]:
        """The files matching `pattern`, sorted."""
        return sorted(glob.glob(_path(pattern)))

    def __repr__(self) -> str:
        return "LocalFiles()"
