"""Grain's private TFRecord module, which MaxText imports and subclasses.

MaxText's input pipelines import ``_TFRecordReader`` and
``_TFRecordDatasetIterator`` from here at module level, and read files on GCS
by subclassing both: its reader skips ``__init__`` and sets ``self._reader`` to
a GCS blob stream; its iterator calls ``DatasetIterator.__init__(self)`` and
sets ``self._reader`` to such a reader. So, as in Grain 0.2.18:

  _TFRecordReader(path)           opens `path` and reads its records with
                                  ``next(reader)`` (bytes; StopIteration at the
                                  end), ``tell()`` and ``seek(offset)``; it reads
                                  whatever binary stream ``_reader`` holds.
  _TFRecordDatasetIterator(path)  a DatasetIterator over such a reader, kept in
                                  ``_reader``; its state is
                                  ``{"reader_offset": byte offset of the next record}``.
  TFRecordIterDataset             `grain.experimental.TFRecordIterDataset`.

The parsing is `grain_sources.TFRecordStreamReader`'s, which also checks both
checksums of every record (Grain's reader does not): a damaged record raises a
ValueError naming its offset instead of yielding damaged bytes.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from grain_dataset import DatasetIterator
from grain_dataset import TFRecordIterDataset as TFRecordIterDataset
from grain_sources import TFRecordStreamReader

__all__ = ["TFRecordIterDataset", "_TFRecordDatasetIterator", "_TFRecordReader"]


class _TFRecordReader(TFRecordStreamReader):
    """Reads the records of the TFRecord file `path`, in order; ``_reader`` is its stream."""

    def __init__(self, path: str | os.PathLike[str]):
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"`path` must be a str or os.PathLike, got {type(path).__name__}.")
        super().__init__(open(path, "rb"))  # noqa: SIM115 (closed by close() or __del__)

    # Grain's name for the stream, which subclasses (MaxText's) set themselves.
    @property
    def _reader(self) -> Any:
        return self.stream

    @_reader.setter
    def _reader(self, stream: Any) -> None:
        self.stream = stream

    def __del__(self) -> None:
        stream = self.__dict__.get("stream")
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()


class _TFRecordDatasetIterator(DatasetIterator[bytes]):
    """A DatasetIterator over the TFRecord file `path` (Grain's, with its state)."""

    _reader: _TFRecordReader

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__()
        self._reader = _TFRecordReader(path)

    def __next__(self) -> bytes:
        return next(self._reader)

    def get_state(self) -> dict[str, int]:
        return {"reader_offset": self._reader.tell()}

    def set_state(self, state: dict[str, int]) -> None:
        offset = state.get("reader_offset") if isinstance(state, dict) else None
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(
                "the state of a TFRecord iterator is {'reader_offset': n} with an int n >= 0, "
                f"as get_state() returns it; got {state!r}."
            )
        self._reader.seek(offset)
