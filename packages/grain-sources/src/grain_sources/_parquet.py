"""A sequential reader of Parquet files whose position (a row number) can be saved and restored.

Rows are read one row group at a time with pyarrow (the `parquet` extra), and
converted to Python objects with ``Table.to_pylist()`` in chunks of
`batch_rows` rows, so that only one row group's Arrow data and one chunk of
Python objects are held at a time. Each row is a dict from column name to a
plain Python value: int, float, str, bytes, bool, None, list for list
columns, dict for struct columns, datetime/date/Decimal for those types.

Restoring to row r finds the row group holding r from the row groups' row
counts in the file footer (a binary search of their cumulative sums) and reads
that row group only, never an earlier one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_sources._object_store import ObjectStoreError
from grain_sources._range_file import RangeFile, remote, store_for
from grain_sources._resumable import ResumableReader

_INSTALL = "pip install grain-sources[parquet]"
_BATCH_ROWS = 1024


def _pyarrow_parquet() -> Any:
    """Returns `pyarrow.parquet`, imported on first use so pyarrow stays optional."""
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError(
            f"reading Parquet files needs pyarrow, which is not installed: {_INSTALL}"
        ) from error
    return pq


def _column_names(schema: Any) -> set[str]:
    """Every name `columns=` may hold: top-level columns and dotted paths into nested ones."""
    names = set(schema.to_arrow_schema().names)
    for i in range(len(schema)):
        parts = schema.column(i).path.split(".")
        names.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return names


class ParquetReader(ResumableReader[dict[str, Any]]):
    """Reads the rows of a Parquet file in order, as dicts, from a row that can be restored.

    `row` is the number of the next row (0-based, across all row groups);
    ``ParquetReader(path, row=r)`` (or ``seek(r)``) continues with exactly
    row r. The footer is read at construction, so a missing, empty or
    non-Parquet file, or an unknown column, fails at once; the data is opened
    at the first read and closed at the end, by `close()`, or when the reader
    is garbage collected (a later read reopens it). Pickling keeps the path,
    options, row counts and row, never an open file.

    Args:
      path: the Parquet file.
      columns: the columns to read (names, or dotted paths into struct
        columns); None reads all of them.
      batch_rows: how many rows are converted to Python objects at a time.
      row: the row to start at, in [0, num_rows].
      filesystem: an fsspec filesystem to read `path` with; URLs (``s3://``,
        ``gs://``, ...) are read through an object store without it too.

    From an object store, a row group is read when its first row is needed
    (its column chunks in a few coalesced range requests), so a sequential pass
    moves each byte once; a random row costs its whole row group: keep row
    groups near 1-16 MB (``row_group_size`` of ``pq.write_table``) for buckets.

    Example::

        with ParquetReader("data.parquet", columns=["text"]) as reader:
            first = next(reader)          # {"text": "..."}
            saved = reader.row            # 1
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        columns: Sequence[str] | None = None,
        batch_rows: int = _BATCH_ROWS,
        *,
        row: int = 0,
        filesystem: Any = None,
    ):
        pq = _pyarrow_parquet()
        text = os.fspath(path)
        self._path = text if isinstance(text, str) else os.fsdecode(text)
        # An object store (a URL, or `filesystem`): read through range requests.
        self._store = store_for(self._path, filesystem) if remote(path, filesystem) else None
        self._size = self._store.size(self._path) if self._store is not None else 0
        if self._store is None and not os.path.exists(self._path):
            raise FileNotFoundError(
                f"Parquet file {self._path!r} does not exist: pass an existing file."
            )
        if self._store is None and os.path.isdir(self._path):
            raise IsADirectoryError(
                f"{self._path!r} is a directory, not a Parquet file: pass the path of a "
                "file in it (a partitioned dataset is read file by file)."
            )
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise ValueError(f"batch_rows must be a positive int, got {batch_rows!r}.")
        self._batch_rows = batch_rows
        try:
            metadata = pq.read_metadata(self._source())
        except (FileNotFoundError, PermissionError, MemoryError, ObjectStoreError):
            raise
        except Exception as error:  # a damaged footer raises many pyarrow error types
            raise ValueError(
                f"{self._path!r} is not a readable Parquet file ({error}): pass a file "
                "written by a Parquet writer (e.g. pyarrow.parquet.write_table)."
            ) from error
        self._columns = self._check_columns(columns, metadata.schema)
        counts = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        # Row group g holds the rows [_ends[g] - counts[g], _ends[g]).
        self._ends = np.cumsum(np.array(counts, dtype=np.int64))
        self._num_rows = int(self._ends[-1]) if counts else 0
        self._file: Any = None
        self._group = -1  # the row group in _table
        self._table: Any = None
        self._chunk: list[dict[str, Any]] = []
        self._chunk_start = 0
        self._row = 0
        self.seek(row)

    def _source(self) -> Any:
        """What pyarrow reads: the local path, or a file over range reads."""
        if self._store is None:
            return self._path
        return RangeFile(self._store, self._path, self._size)

    def _check_columns(self, columns: Sequence[str] | None, schema: Any) -> list[str] | None:
        if columns is None:
            return None
        if isinstance(columns, str | bytes):
            raise TypeError(
                f"columns must be a sequence of column names, got the string {columns!r}: "
                f"write columns=[{columns!r}]."
            )
        columns = list(columns)
        known = _column_names(schema)
        unknown = [name for name in columns if name not in known]
        if unknown:
            raise ValueError(
                f"Parquet file {self._path!r} has no column(s) {unknown}: choose from "
                f"{sorted(schema.to_arrow_schema().names)}."
            )
        return columns

    # -- position -----------------------------------------------------------------

    @property
    def path(self) -> str:
        """The file this reader reads."""
        return self._path

    @property
    def columns(self) -> list[str] | None:
        """The columns read, or None for all of them."""
        return None if self._columns is None else list(self._columns)

    @property
    def num_rows(self) -> int:
        """The number of rows in the file."""
        return self._num_rows

    @property
    def num_row_groups(self) -> int:
        """The number of row groups in the file."""
        return len(self._ends)

    @property
    def row(self) -> int:
        """The number of the next row (`num_rows` once all are read)."""
        return self._row

    def seek(self, row: int) -> None:
        """Moves to row number `row`, in [0, num_rows]; nothing is read until the next row."""
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row <= self._num_rows:
            raise ValueError(
                f"row must be an int in [0, {self._num_rows}] for Parquet file {self._path!r}, "
                f"got {row!r}: restore a row this reader reported for the same file."
            )
        self._row = row
        # Rows already handed out may have been changed by their user: convert them again.
        self._chunk, self._chunk_start = [], 0

    # -- reading ------------------------------------------------------------------

    def _load(self, row: int) -> None:
        """Converts the chunk of rows starting at `row` (reading its row group if needed)."""
        group = int(np.searchsorted(self._ends, row, side="right"))
        try:
            if group != self._group:
                if self._file is None:
                    # Pages written with checksums (write_page_checksum=True) are verified.
                    # pre_buffer: a row group's column chunks in few, coalesced reads.
                    self._file = _pyarrow_parquet().ParquetFile(
                        self._source(),
                        page_checksum_verification=True,
                        pre_buffer=self._store is not None,
                    )
                self._table = None  # let the previous row group go before reading the next
                self._group = -1
                self._table = self._file.read_row_group(group, columns=self._columns)
                self._group = group
            start = int(self._ends[group]) - self._table.num_rows
            self._chunk = self._table.slice(row - start, self._batch_rows).to_pylist()
        except (
            FileNotFoundError,
            PermissionError,
            IsADirectoryError,
            MemoryError,
            ObjectStoreError,
        ):
            raise
        except Exception as error:
            # Damaged data surfaces as many pyarrow errors (OSError, ArrowInvalid,
            # UnicodeDecodeError, ...) none of which names the file.
            raise ValueError(
                f"Parquet file {self._path!r} is corrupt: reading row {row} (row group "
                f"{group}) failed with {type(error).__name__}: {error}"
            ) from error
        self._chunk_start = row

    def __iter__(self) -> ParquetReader:
        return self

    def __next__(self) -> dict[str, Any]:
        row = self._row
        if row >= self._num_rows:
            self.close()
            raise StopIteration
        offset = row - self._chunk_start
        if not 0 <= offset < len(self._chunk):
            self._load(row)
            offset = 0
        self._row = row + 1
        return self._chunk[offset]

    def close(self) -> None:
        """Closes the file and drops buffered rows (idempotent); a later read reopens it."""
        self._table, self._group = None, -1
        self._chunk, self._chunk_start = [], 0
        super().close()

    # -- pickling -----------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_file=None, _table=None, _group=-1, _chunk=[], _chunk_start=0)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"ParquetReader({self._path!r}, row={self._row} of {self._num_rows})"
