"""RangeFile: a read-only, seekable file object over `ObjectStore` range reads.

Readers that take a file object (pyarrow's Parquet reader, the TFRecord
reader's buffered reads) read objects through it, so every read they make is a
range request with the store's retries and deadline. The object's size is
fixed when the file is made (the store checked it exists): reads past it return
nothing, as at the end of a local file.
"""

from __future__ import annotations

import io
import os
from typing import Any

from grain_sources._object_store import ObjectStore, default_store, is_url, protocol_of


class RangeFile(io.RawIOBase):
    """The object at `url`, `size` bytes long, read with `store`."""

    def __init__(self, store: ObjectStore, url: str, size: int):
        super().__init__()
        self._store = store
        self._url = url
        self._size = size
        self._position = 0

    @property
    def name(self) -> str:
        return self._url

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset} in {self._url!r}")
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def size(self) -> int:
        return self._size

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        length = max(0, min(len(view), self._size - self._position))
        if not length:
            return 0
        data = self._store.read(self._url, self._position, length)
        view[:length] = data
        self._position += length
        return length


def store_for(path: str, filesystem: Any = None) -> ObjectStore:
    """The store that reads `path`: the shared one of its protocol, or one over `filesystem`."""
    if filesystem is None:
        return default_store(protocol_of(path))
    return ObjectStore(protocol_of(path), filesystem=filesystem)


def remote(path: str | os.PathLike[str], filesystem: Any) -> bool:
    """Whether `path` is read through an object store (a URL, or any path with `filesystem`)."""
    return filesystem is not None or is_url(os.fspath(path))
