"""TFRecord files: a writer and a sequential reader whose position can be saved and restored.

A TFRecord file is a sequence of records, each framed as::

    uint64 length            little endian
    uint32 masked_crc(length bytes)
    length bytes of data
    uint32 masked_crc(data)

where ``masked_crc(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2**32)`` and
``c = crc32c(x)``. The reader's position is the byte offset of the next
record, so a reader created at a saved position continues with exactly the
record that followed.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable
from typing import Any, BinaryIO

from grain_sources import _crc32c
from grain_sources._object_store import ObjectStore
from grain_sources._range_file import RangeFile, remote, store_for
from grain_sources._resumable import ResumableReader

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_MASK_DELTA = 0xA282EAD8
_BUFFER_SIZE = 1 << 20


def masked_crc(data: Any) -> int:
    """The masked CRC-32C that TFRecord stores after the length and after the data."""
    crc = _crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


class CorruptRecordError(ValueError):
    """A TFRecord record whose framing or checksums are wrong.

    Attributes:
      path: the file.
      offset: the byte offset of the record that could not be read.
    """

    def __init__(self, path: str, offset: int, problem: str, fix: str = ""):
        fix = fix or (
            "Re-create the file, or skip it; pass verify_crc=False only to read data "
            "whose checksums are known to be wrong."
        )
        super().__init__(
            f"corrupt TFRecord file {path!r}: the record at byte offset {offset} {problem}. {fix}"
        )
        self.path = path
        self.offset = offset

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable, so that the error crosses from a worker process intact: rebuilt
        # from its message (args) and attributes, without calling __init__ again.
        return (_rebuild_error, (type(self), self.args), self.__dict__)


def _rebuild_error(cls: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    return cls.__new__(cls, *args)


class TruncatedRecordError(CorruptRecordError):
    """A TFRecord file that ends in the middle of a record (e.g. an interrupted copy)."""

    def __init__(self, path: str, offset: int, problem: str, fix: str = ""):
        fix = fix or "The file was cut short: copy or write it again."
        ValueError.__init__(
            self,
            f"truncated TFRecord file {path!r}: the record at byte offset {offset} {problem}. "
            + fix,
        )
        self.path = path
        self.offset = offset


def _as_bytes_view(record: Any, position: int) -> memoryview:
    if not isinstance(record, bytes | bytearray | memoryview):
        raise TypeError(
            f"record {position} must be bytes, bytearray or memoryview, got "
            f"{type(record).__name__}: serialize it first (e.g. str.encode() or "
            "example.SerializeToString())."
        )
    view = memoryview(record)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B")


def write_tfrecord(records: Iterable[Any], path: str | os.PathLike[str]) -> int:
    """Writes `records` (bytes, bytearray or memoryview each) to a TFRecord file at `path`.

    An existing file is replaced. Returns the number of records written. If a
    record is not bytes-like, TypeError names its position; the records before
    it are already in the file.

    Example::

        write_tfrecord([b"a", b"bc"], "/tmp/data.tfrecord")  # 2
    """
    count = 0
    with open(path, "wb") as file:
        for record in records:
            view = _as_bytes_view(record, count)
            data = record if isinstance(record, bytes) else view
            file.write(_HEADER.pack(view.nbytes, masked_crc(_LENGTH.pack(view.nbytes))))
            file.write(data)
            file.write(_FOOTER.pack(masked_crc(data)))
            count += 1
    return count


def _check_file(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not isinstance(text, str):
        text = os.fsdecode(text)
    if not os.path.exists(text):
        raise FileNotFoundError(f"TFRecord file {text!r} does not exist: pass an existing file.")
    if os.path.isdir(text):
        raise IsADirectoryError(
            f"{text!r} is a directory, not a TFRecord file: pass the path of a file in it."
        )
    return text


def _unpack_header(
    header: bytes, name: str, offset: int, verify: bool, size: int | None, fix: str = ""
) -> int:
    """The length a record's header at `offset` gives, its checksum and end checked.

    `size` is the file's size, or None for a stream of unknown length (then a
    record that runs past the end shows when its bytes are read).
    """
    if len(header) < _HEADER.size:
        raise TruncatedRecordError(
            name, offset, f"has only {len(header)} of the 12 header bytes", fix
        )
    length, length_crc = _HEADER.unpack(header)
    if verify and masked_crc(header[:8]) != length_crc:
        raise CorruptRecordError(
            name,
            offset,
            "has a wrong length checksum (or the offset is not the start of a record)",
            fix,
        )
    end = offset + _HEADER.size + length + _FOOTER.size
    if size is not None and end > size:
        raise TruncatedRecordError(
            name,
            offset,
            f"says it holds {length} bytes, but the file ends {end - size} bytes too early",
            fix,
        )
    return length


def read_record(
    file: Any, name: str, offset: int, verify: bool, size: int | None = None
) -> bytes | None:
    """The record at `offset`, where `file` stands; None at the end of the data.

    Shared by `TFRecordReader` (which knows the file's `size`) and
    `TFRecordStreamReader` (a stream of unknown length). A damaged record
    raises CorruptRecordError (TruncatedRecordError if the data ends inside it)
    and leaves `file` at `offset`, so that the error is repeatable.
    """
    header = file.read(_HEADER.size)
    if not header:
        return None
    try:
        length = _unpack_header(header, name, offset, verify, size)
        data = file.read(length)
        footer = file.read(_FOOTER.size)
        if len(data) != length or len(footer) != _FOOTER.size:
            raise TruncatedRecordError(
                name,
                offset,
                "ends before its last byte"
                if size is not None
                else f"says it holds {length} bytes but the stream ends first",
            )
        if verify and masked_crc(data) != _FOOTER.unpack(footer)[0]:
            raise CorruptRecordError(name, offset, "has a wrong data checksum")
    except CorruptRecordError:
        file.seek(offset)
        raise
    return data


class TFRecordReader(ResumableReader[bytes]):
    """Reads the records of a TFRecord file in order, from a position that can be restored.

    `position` is the byte offset of the next record and `index` the number
    of records before it; ``TFRecordReader(path, offset=p, index=i)`` (or
    ``seek(p, i)``) continues with exactly the record that followed. The file
    is opened at the first read and closed at the end of the file, by
    `close()`, or when the reader is garbage collected; a read after `close()`
    reopens it at `position`. Pickling keeps the path, options and position,
    never the open file, so a reader can be sent to another process.

    Both checksums of every record are verified unless ``verify_crc=False``
    (which skips them, trading safety for speed). A damaged record raises
    CorruptRecordError, or TruncatedRecordError if the file ends inside it,
    naming the file and the record's offset; the position stays at that
    record.

    A URL (``s3://``, ``gs://``, ...), or any path with ``filesystem=`` (an
    fsspec filesystem), is read from an object store in range requests of
    `buffer_size` bytes, with retries. For random access by record number,
    use `TFRecordDataSource` (an offset index, kept in a sidecar file).

    Example::

        with TFRecordReader("data.tfrecord") as reader:
            first = next(reader)
            saved = reader.position, reader.index
        with TFRecordReader("data.tfrecord", offset=saved[0], index=saved[1]) as reader:
            rest = list(reader)   # every record after `first`
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        verify_crc: bool = True,
        offset: int = 0,
        index: int = 0,
        buffer_size: int = _BUFFER_SIZE,
        filesystem: Any = None,
    ):
        if remote(path, filesystem):
            # An object store: buffered range reads of `buffer_size` bytes each.
            self._path = os.fspath(path)
            self._store: ObjectStore | None = store_for(self._path, filesystem)
            self._remote_size = self._store.size(self._path)
        else:
            self._path = _check_file(path)
            self._store = None
        self._verify = bool(verify_crc)
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int of bytes, got {buffer_size!r}.")
        self._buffer_size = buffer_size
        self._file: BinaryIO | None = None
        self._size = 0
        self._offset = 0
        self._index = 0
        self.seek(offset, index)

    # -- position -----------------------------------------------------------------

    @property
    def path(self) -> str:
        """The file this reader reads."""
        return self._path

    @property
    def verify_crc(self) -> bool:
        """Whether the checksums of each record are checked."""
        return self._verify

    @property
    def position(self) -> int:
        """The byte offset of the next record (the file size once all are read)."""
        return self._offset

    @property
    def index(self) -> int:
        """The number of records before `position`, as counted from the `index` given."""
        return self._index

    def seek(self, offset: int, index: int = 0) -> None:
        """Moves to the record starting at byte `offset`, the record number `index`.

        `offset` must be a `position` this reader (or another over the same
        file) reported. An offset past the end of the file raises ValueError.
        With verify_crc, an offset that is not the start of a record raises
        CorruptRecordError now rather than at the next read. `index` is not
        checked: it only numbers the records for `index`. A bad first record
        (offset 0) shows at the first read, as for a new reader.
        """
        for name, number in (("offset", offset), ("index", index)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(
                    f"`{name}` must be an int >= 0 (a position this reader reported), "
                    f"got {number!r}."
                )
        size = self._file_size()
        if offset > size:
            raise ValueError(
                f"offset {offset} is past the end of TFRecord file {self._path!r} "
                f"({size} bytes): restore a position read from this same file."
            )
        # Offset 0 is always a record boundary; a bad first record shows at the first read.
        if self._verify and 0 < offset < size:
            self._check_header_at(offset, size)
        self._offset = offset
        self._index = index
        if self._file is not None:
            self._file.seek(offset)

    def _check_header_at(self, offset: int, size: int) -> None:
        """Reads the header at `offset` and checks its CRC, leaving the position unchanged."""
        with self._open_raw(_HEADER.size) as file:
            file.seek(offset)
            header = file.read(_HEADER.size)
        _unpack_header(
            header,
            self._path,
            offset,
            self._verify,
            size,
            fix=(
                "Restore a position this reader reported for this file; if it did, the "
                "file has changed or is damaged since."
            ),
        )

    # -- reading ------------------------------------------------------------------

    def _file_size(self) -> int:
        return self._remote_size if self._store is not None else os.stat(self._path).st_size

    def _open_raw(self, buffering: int) -> BinaryIO:
        # buffering=1 would ask for line buffering, which binary files lack.
        buffering = max(buffering, 2)
        if self._store is None:
            return open(self._path, "rb", buffering=buffering)
        raw = RangeFile(self._store, self._path, self._remote_size)
        return io.BufferedReader(raw, buffer_size=buffering)  # type: ignore[return-value]

    def _open(self) -> BinaryIO:
        file = self._open_raw(self._buffer_size)
        try:
            self._size = self._file_size()
            file.seek(self._offset)
        except BaseException:
            file.close()
            raise
        self._file = file
        return file

    def __iter__(self) -> TFRecordReader:
        return self

    def __next__(self) -> bytes:
        file = self._file if self._file is not None else self._open()
        offset = self._offset
        data = read_record(file, self._path, offset, self._verify, self._size)
        if data is None:
            if offset < self._size:
                # The file shrank while open, or a read failed quietly.
                raise TruncatedRecordError(self._path, offset, "could not be read")
            self.close()
            raise StopIteration
        length = len(data)
        self._offset = offset + _HEADER.size + length + _FOOTER.size
        self._index += 1
        return data

    # -- pickling -----------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"TFRecordReader({self._path!r}, position={self._offset}, index={self._index})"
