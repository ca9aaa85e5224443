"""Record files laid end to end, read at sorted record numbers: what record-range shards read.

A `RecordFiles` numbers the records of its files 0, 1, ... across the files in
order (as the random-access sources do, `grain_sources._file_index`), and
``reader().read(positions)`` returns the records at an increasing array of
those numbers. A shard is then any progression of numbers (a host's range, a
worker's every n-th of it), whatever the files' sizes: 2 files serve 8 hosts.

Each format knows where record r of a file starts without reading the records
before it:

  Parquet      the row groups' row counts in the footer (no data read); a read
               decodes one row group and converts only the rows asked for.
  TFRecord     the byte offset of every record: the sidecar index of
               `write_tfrecord_index`, else one pass over the framing (headers
               only are parsed; a warning says so once per file).
  JSON lines   the byte offset of every non-blank line, found with one
               vectorized pass over the bytes (``np.flatnonzero(chunk == 10)``).

A `RecordFiles` holds only the paths, options and per-file counts, so it
pickles cheaply to worker processes; the offsets and open files belong to a
`RecordReader`, which one iterator owns and closes.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from grain_sources._file_index import by_file, locate
from grain_sources._paths import expand
from grain_sources._tfrecord import read_record

_CHUNK_BYTES = 4 << 20
_PARQUET_ROWS = 1024


class RecordFiles(abc.ABC):
    """Files of one record format whose records are numbered across the files.

    Subclasses say how to count a file's records and how to read records of
    one file at sorted record numbers (`_open`). The constructor expands
    `paths` (a file, a glob, ``name@N`` or a list of them) and counts every
    file's records now, so a missing or unreadable file fails at once.
    """

    format: ClassVar[str] = "records"

    def __init__(self, paths: Any):
        if isinstance(paths, str | os.PathLike) and _is_url(os.fspath(paths)):
            raise ValueError(
                f"{self.format} record-range shards read local files; got the URL {paths!r}."
            )
        self._paths = expand(paths)
        urls = [path for path in self._paths if _is_url(path)]
        if urls:
            raise ValueError(
                f"{self.format} record-range shards read local files; got URLs {urls[:3]}: copy "
                "them locally, or read them with the per-file datasets."
            )
        counts = [self._count(path) for path in self._paths]
        self._counts = np.asarray(counts, dtype=np.int64)
        self._ends = np.cumsum(self._counts)
        self._starts = self._ends - self._counts

    @property
    def paths(self) -> list[str]:
        """The files, in the order their records are numbered."""
        return list(self._paths)

    @property
    def counts(self) -> list[int]:
        """How many records each file holds."""
        return [int(count) for count in self._counts]

    @property
    def num_records(self) -> int:
        """How many records all files hold together."""
        return int(self._ends[-1]) if len(self._ends) else 0

    def reader(self) -> RecordReader:
        """A new reader of these files (it opens them as it needs them; close it)."""
        return RecordReader(self)

    @abc.abstractmethod
    def _count(self, path: str) -> int:
        """The number of records in `path`; raises a clear error for a bad file."""

    @abc.abstractmethod
    def _open(self, path: str) -> _FileReader:
        """A reader of the records of `path`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._paths)} files, {self.num_records} records)"


def _is_url(path: str) -> bool:
    return "://" in path


class _FileReader(abc.ABC):
    """Reads the records of one file at sorted record numbers.

    Like a generator, a reader dropped without `close()` (an iterator left
    unfinished) releases its file when garbage collected, without a warning.
    """

    _file: Any = None

    @abc.abstractmethod
    def take(self, indices: np.ndarray) -> list[Any]:
        """The records at `indices` (increasing, within the file)."""

    def close(self) -> None:
        """Releases the file (idempotent)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __del__(self) -> None:
        self.close()


class RecordReader:
    """Reads records of a `RecordFiles` by their numbers, keeping one file open at a time.

    Example::

        files = ParquetRecordFiles(["a.parquet", "b.parquet"])
        with files.reader() as reader:
            rows = reader.read(np.arange(3, 1000, 8))   # records 3, 11, 19, ...
    """

    def __init__(self, files: RecordFiles):
        self._files = files
        self._file = -1
        self._reader: _FileReader | None = None

    def read(self, positions: np.ndarray) -> list[Any]:
        """The records at `positions`, an increasing int array within [0, num_records)."""
        positions = np.asarray(positions, dtype=np.int64)
        if not len(positions):
            return []
        total = self._files.num_records
        if positions[0] < 0 or positions[-1] >= total:
            raise IndexError(
                f"record numbers must be in [0, {total}) for {self._files!r}, got "
                f"{int(positions[0])}..{int(positions[-1])}."
            )
        if len(positions) > 1 and not (np.diff(positions) > 0).all():
            raise ValueError(
                "record numbers must increase (each file is read forward, once per call): "
                "sort them, and read repeated numbers once."
            )
        files, local = locate(self._files._ends, self._files._starts, positions)
        records: list[Any] = []
        # Positions increase, so by_file's groups are the files in order, each read once.
        for file, where in by_file(files):
            records.extend(self._file_reader(file).take(local[where]))
        return records

    def _file_reader(self, file: int) -> _FileReader:
        if file != self._file or self._reader is None:
            self.close()
            self._reader = self._files._open(self._files._paths[file])
            self._file = file
        return self._reader

    def close(self) -> None:
        """Closes the open file, if any (a later read reopens what it needs)."""
        reader, self._reader, self._file = self._reader, None, -1
        if reader is not None:
            reader.close()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- Parquet ------------------------------------------------------------------------


class ParquetRecordFiles(RecordFiles):
    """The rows of Parquet files, as dicts, numbered across the files.

    Args:
      paths: Parquet files (a path, a glob, ``name@N``, or a list of them).
      columns: the columns to read; None reads all.
    """

    format = "Parquet"

    def __init__(self, paths: Any, columns: Sequence[str] | None = None):
        if isinstance(columns, str | bytes):
            raise TypeError(
                f"`columns` must be a list of column names, got the string {columns!r}: "
                f"write columns=[{columns!r}]."
            )
        self._columns = None if columns is None else list(columns)
        super().__init__(paths)

    def _count(self, path: str) -> int:
        from grain_sources._parquet import ParquetReader

        # The reader reads the footer only, and checks the file and the columns.
        return ParquetReader(path, columns=self._columns).num_rows

    def _open(self, path: str) -> _FileReader:
        return _ParquetFile(path, self._columns)


class _ParquetFile(_FileReader):
    def __init__(self, path: str, columns: list[str] | None):
        from grain_sources._parquet import _pyarrow_parquet

        self._path = path
        self._columns = columns
        self._file = _pyarrow_parquet().ParquetFile(path)
        metadata = self._file.metadata
        counts = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        self._ends = np.cumsum(np.asarray(counts, dtype=np.int64))
        self._group = -1
        self._table: Any = None

    def take(self, indices: np.ndarray) -> list[Any]:
        groups = np.searchsorted(self._ends, indices, side="right")
        rows: list[Any] = []
        for group, where in by_file(groups):
            if group != self._group:
                self._table = None  # let the previous row group go first
                try:
                    self._table = self._file.read_row_group(group, columns=self._columns)
                except Exception as error:
                    raise ValueError(
                        f"Parquet file {self._path!r} is corrupt: reading row group {group} "
                        f"failed with {type(error).__name__}: {error}"
                    ) from error
                self._group = group
            start = int(self._ends[group]) - self._table.num_rows
            wanted = indices[where] - start
            # Converting to Python objects is the cost: convert only the rows taken, a
            # run of consecutive rows as a zero-copy slice, others gathered by `take`.
            for begin in range(0, len(wanted), _PARQUET_ROWS):
                part = wanted[begin : begin + _PARQUET_ROWS]
                first, count = int(part[0]), len(part)
                if int(part[-1]) - first == count - 1:
                    rows.extend(self._table.slice(first, count).to_pylist())
                else:
                    rows.extend(self._table.take(part).to_pylist())
        return rows

    def close(self) -> None:
        self._table, self._group = None, -1
        super().close()


# -- TFRecord -----------------------------------------------------------------------


class TFRecordRecordFiles(RecordFiles):
    """The records of TFRecord files, as bytes, numbered across the files.

    Args:
      paths: TFRecord files (a path, a glob, ``name@N``, or a list of them).
      verify_crc: check both checksums of every record read.

    Counting a file reads its sidecar offset index (`write_tfrecord_index`),
    or else passes over its record headers once; so does each reader.
    """

    format = "TFRecord"

    def __init__(self, paths: Any, verify_crc: bool = True):
        self._verify_crc = bool(verify_crc)
        super().__init__(paths)

    def _count(self, path: str) -> int:
        return len(_tfrecord_offsets(path, advise=True)) - 1

    def _open(self, path: str) -> _FileReader:
        return _TFRecordFile(path, self._verify_crc)


def _tfrecord_offsets(path: str, advise: bool = False) -> np.ndarray:
    """Every record's byte offset, then the data's end.

    Without a sidecar index, `advise` logs (once, when the dataset counts the
    file) that one was built; each iterator then scans without saying so again.
    """
    from grain_sources._tfrecord_source import SIDECAR_SUFFIX, _load_index, _scan

    if advise or os.path.exists(path + SIDECAR_SUFFIX):
        return _load_index(path, None)
    return _scan(path, None)


class _TFRecordFile(_FileReader):
    def __init__(self, path: str, verify_crc: bool):
        self._path = path
        self._verify = verify_crc
        self._offsets = _tfrecord_offsets(path)
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()

    def take(self, indices: np.ndarray) -> list[Any]:
        file, records = self._file, []
        size = int(self._offsets[-1])
        for offset in self._offsets[indices].tolist():
            if file.tell() != offset:
                file.seek(offset)
            record = read_record(file, self._path, offset, self._verify, size)
            if record is None:
                raise ValueError(
                    f"TFRecord file {self._path!r} ends before its record at byte {offset}: "
                    "the file changed since it was indexed; rebuild its index."
                )
            records.append(record)
        return records


# -- JSON lines ---------------------------------------------------------------------


class JsonLinesRecordFiles(RecordFiles):
    """The lines of JSON-lines files, each parsed with ``json.loads``, numbered across the files.

    Lines of only whitespace (empty, or a lone carriage return) are not
    records; any other line that is not JSON raises a ValueError naming the
    file, the record number and its byte offset.
    """

    format = "JSON-lines"

    def _count(self, path: str) -> int:
        return len(_line_spans(path)[0])

    def _open(self, path: str) -> _FileReader:
        return _JsonLinesFile(path)


def _line_spans(path: str) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) byte offsets of every line of `path` holding more than whitespace.

    One pass over the bytes in chunks, vectorized: the newlines' positions, and
    per line whether any byte is not whitespace (``np.logical_or.reduceat``
    over the chunk's lines, bool in and out: no wider copy of the chunk; a
    line cut by a chunk's end carries its answer on).
    """
    newlines: list[np.ndarray] = []
    solid: list[np.ndarray] = []  # per complete line: whether it holds more than whitespace
    size, carry = 0, False
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            data = np.frombuffer(chunk, dtype=np.uint8)
            breaks = np.flatnonzero(data == 10)
            # Whitespace is space and \t \n \v \f \r (9-13), as str.strip() sees bytes;
            # in place, so a chunk costs a few times its size at most.
            text = data > 13
            text |= data < 9
            text &= data != 32
            segments = np.concatenate([[0], breaks + 1])
            segments = segments[segments < len(data)]
            lines = np.logical_or.reduceat(text, segments)
            lines[0] |= carry
            if len(breaks) and breaks[-1] == len(data) - 1:
                carry = False  # the chunk ends with a newline: every segment is a whole line
            else:
                carry, lines = bool(lines[-1]), lines[:-1]
            newlines.append(breaks + size)
            solid.append(lines)
            size += len(chunk)
    ends = np.concatenate([*newlines, [size]]).astype(np.int64)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    keep = np.concatenate([*solid, [carry]]).astype(bool)
    return starts[keep], ends[keep]


class _JsonLinesFile(_FileReader):
    def __init__(self, path: str):
        self._path = path
        self._starts, self._ends = _line_spans(path)
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()

    def take(self, indices: np.ndarray) -> list[Any]:
        file, records = self._file, []
        for index, start, end in zip(
            indices.tolist(),
            self._starts[indices].tolist(),
            self._ends[indices].tolist(),
            strict=True,
        ):
            if file.tell() != start:
                file.seek(start)
            line = file.read(end - start + 1)[: end - start]
            try:
                records.append(json.loads(line))
            except ValueError as error:
                raise ValueError(
                    f"JSON-lines file {self._path!r}: record {index} (the line at byte "
                    f"{start}) is not JSON ({error}): fix or remove that line."
                ) from error
        return records
