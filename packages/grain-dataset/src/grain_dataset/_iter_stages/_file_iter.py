"""IterDatasets that stream the records of one file: TFRecord and Parquet.

Each is a source (no parents) whose iterator wraps a resumable reader of
grain_sources. Their states are positions in the file, never data:

  TFRecordIterDataset   {"offset": byte offset of the next record, "index": records before it}
  ParquetIterDataset    {"row": number of the next row}

so `set_state` on a fresh iterator reopens the file at that position and
continues with exactly the next record. The datasets hold only the path and
the reader options, so they pickle cheaply, and `MapDataset.source(paths).map(
TFRecordIterDataset)` builds one per file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from grain_dataset._core._base import DatasetIterator, IterDataset
from grain_dataset._core._state import check_state
from grain_sources import ParquetReader, TFRecordReader, is_url


class TFRecordIterDataset(IterDataset[bytes]):
    """The records of a TFRecord file, as bytes, in file order.

    Args:
      path: the TFRecord file; a missing path or a directory raises at once.
        A URL (``gs://...``) is first touched when it is read, as in Grain: no
        request at construction (MaxText subclasses this class for GCS paths
        and reads them its own way).
      verify_crc: check both checksums of every record (default); a damaged
        record raises grain_sources' CorruptRecordError naming its offset.

    Example::

        ds = TFRecordIterDataset("train.tfrecord").map(parse_example).batch(32)
    """

    def __init__(self, path: str | os.PathLike[str], *, verify_crc: bool = True):
        super().__init__()
        if is_url(path):
            self._path = os.fspath(path)
            self._verify_crc = bool(verify_crc)
            return
        # A reader checks the path now; it opens nothing until the first read.
        reader = TFRecordReader(path, verify_crc=verify_crc)
        self._path = reader.path
        self._verify_crc = reader.verify_crc

    @property
    def path(self) -> str:
        """The file read."""
        return self._path

    def __iter__(self) -> DatasetIterator[bytes]:
        return _TFRecordIterator(self)

    def __repr__(self) -> str:
        return f"TFRecordIterDataset({self._path!r})"


class _TFRecordIterator(DatasetIterator[bytes]):
    def __init__(self, dataset: TFRecordIterDataset):
        super().__init__()
        self._dataset = dataset
        self._reader = TFRecordReader(dataset._path, verify_crc=dataset._verify_crc)

    def __next__(self) -> bytes:
        return next(self._reader)

    def get_state(self) -> dict[str, Any]:
        return {"offset": self._reader.position, "index": self._reader.index}

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("offset", "index"))
        try:
            self._reader.seek(state["offset"], state["index"])
        except ValueError as error:
            raise ValueError(f"state {state!r} does not fit {stage}: {error}") from error

    def close(self) -> None:
        self._reader.close()


class ParquetIterDataset(IterDataset[dict[str, Any]]):
    """The rows of Parquet files, as dicts of column name to Python value.

    Args:
      path: a Parquet file, or a sequence of them; a missing, empty or
        non-Parquet file raises at once. Several files are read interleaved,
        one row of each in turn (as Grain does), like an
        ``InterleaveIterDataset`` over one dataset per file with
        ``cycle_length=len(path)``; one file is read in order.
      **read_kwargs: passed to grain_sources' ParquetReader: `columns`
        (the columns to read, default all) and `batch_rows` (rows converted
        to Python objects at a time).

    Example::

        ds = ParquetIterDataset("train.parquet", columns=["text", "label"]).batch(8)
        ds = ParquetIterDataset(["a.parquet", "b.parquet"])  # a0, b0, a1, b1, ...
    """

    def __init__(
        self, path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], **read_kwargs: Any
    ):
        super().__init__()
        if "row" in read_kwargs:
            raise TypeError(
                "ParquetIterDataset does not take `row`: restore a position with "
                "iterator.set_state({'row': r}) instead."
            )
        paths = [path] if isinstance(path, str | os.PathLike) else path
        if not isinstance(paths, Sequence) or isinstance(paths, bytes):
            raise TypeError(
                f"`path` must be a file path or a sequence of them, got {type(path).__name__}."
            )
        if not paths:
            raise ValueError("`path` is an empty sequence: give at least one Parquet file.")
        # Reading the footers now makes a bad path or an unknown column fail here.
        self._paths = [ParquetReader(p, **read_kwargs).path for p in paths]
        self._path = self._paths[0]
        self._options = dict(read_kwargs)

    @property
    def path(self) -> str:
        """The file read (the first one, when there are several)."""
        return self._path

    @property
    def paths(self) -> list[str]:
        """Every file read."""
        return list(self._paths)

    def __iter__(self) -> DatasetIterator[dict[str, Any]]:
        if len(self._paths) == 1:
            return _ParquetIterator(self)
        from grain_dataset._iter_stages._interleave import InterleaveIterDataset

        files = [ParquetIterDataset(p, **self._options) for p in self._paths]
        return iter(InterleaveIterDataset(files, cycle_length=len(files)))

    def __repr__(self) -> str:
        if len(self._paths) == 1:
            return f"ParquetIterDataset({self._path!r})"
        return f"ParquetIterDataset({len(self._paths)} files, first {self._path!r})"


class _ParquetIterator(DatasetIterator[dict[str, Any]]):
    def __init__(self, dataset: ParquetIterDataset):
        super().__init__()
        self._dataset = dataset
        self._reader = ParquetReader(dataset._path, **dataset._options)

    def __next__(self) -> dict[str, Any]:
        return next(self._reader)

    def get_state(self) -> dict[str, Any]:
        return {"row": self._reader.row}

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("row",))
        try:
            self._reader.seek(state["row"])
        except ValueError as error:
            raise ValueError(f"state {state!r} does not fit {stage}: {error}") from error

    def close(self) -> None:
        self._reader.close()
