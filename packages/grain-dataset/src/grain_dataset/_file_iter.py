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
from typing import Any

from grain_dataset._base import DatasetIterator, IterDataset
from grain_dataset._state import check_state
from grain_sources import ParquetReader, TFRecordReader


class TFRecordIterDataset(IterDataset[bytes]):
    """The records of a TFRecord file, as bytes, in file order.

    Args:
      path: the TFRecord file; a missing path or a directory raises at once.
      verify_crc: check both checksums of every record (default); a damaged
        record raises grain_sources' CorruptRecordError naming its offset.

    Example::

        ds = TFRecordIterDataset("train.tfrecord").map(parse_example).batch(32)
    """

    def __init__(self, path: str | os.PathLike[str], *, verify_crc: bool = True):
        super().__init__()
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
    """The rows of a Parquet file, as dicts of column name to Python value, in file order.

    Args:
      path: the Parquet file; a missing, empty or non-Parquet file raises at once.
      **reader_options: passed to grain_sources' ParquetReader: `columns`
        (the columns to read, default all) and `batch_rows` (rows converted
        to Python objects at a time).

    Example::

        ds = ParquetIterDataset("train.parquet", columns=["text", "label"]).batch(8)
    """

    def __init__(self, path: str | os.PathLike[str], **reader_options: Any):
        super().__init__()
        if "row" in reader_options:
            raise TypeError(
                "ParquetIterDataset does not take `row`: restore a position with "
                "iterator.set_state({'row': r}) instead."
            )
        # Reading the footer now makes a bad path or an unknown column fail here.
        reader = ParquetReader(path, **reader_options)
        self._path = reader.path
        self._options = dict(reader_options)

    @property
    def path(self) -> str:
        """The file read."""
        return self._path

    def __iter__(self) -> DatasetIterator[dict[str, Any]]:
        return _ParquetIterator(self)

    def __repr__(self) -> str:
        return f"ParquetIterDataset({self._path!r})"


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
