"""TFRecord records read from a binary stream the caller opened.

`TFRecordReader` opens its file itself (and knows its size, its path, how to
reopen it). Some callers have a stream instead: a blob reader of an object
store client, a file opened some special way, an `io.BytesIO`. This reader
parses records from any object with ``read``, ``seek`` and ``tell``; the
stream's position is the reader's (``tell()`` is the byte offset of the next
record), so a position saved with `tell` and given back to `seek` continues
with exactly the next record. The framing and both checksums are checked as in
`TFRecordReader` (see `grain_sources._tfrecord`).
"""

from __future__ import annotations

from typing import Any

from grain_sources._tfrecord import read_record

__all__ = ["TFRecordStreamReader"]


class TFRecordStreamReader:
    """Reads the records of a TFRecord stream in order, as bytes.

    Args:
      stream: a binary stream positioned at a record (usually at 0): anything
        with ``read(n)``, ``seek(offset)`` and ``tell()``.
      verify_crc: check both checksums of every record (default).

    `tell()` is the byte offset of the next record and ``seek(offset)`` goes
    back to one `tell` reported. A damaged record raises CorruptRecordError (a
    ValueError), or TruncatedRecordError if the stream ends inside it, and
    leaves the position at that record. `close()` closes the stream.

    Subclasses may set `stream` themselves instead of calling ``__init__``
    (to open it their own way): every method reads only `stream` and
    `verify_crc`, whose class default is True.

    Example::

        with open("data.tfrecord", "rb") as file:
            reader = TFRecordStreamReader(file)
            first = next(reader)
            saved = reader.tell()
            reader.seek(saved)   # continues with the second record
    """

    verify_crc: bool = True
    stream: Any

    def __init__(self, stream: Any, *, verify_crc: bool = True):
        missing = [
            name for name in ("read", "seek", "tell") if not callable(getattr(stream, name, None))
        ]
        if missing:
            raise TypeError(
                "`stream` must be a binary stream with read, seek and tell (e.g. "
                f"open(path, 'rb')); {type(stream).__name__} lacks {', '.join(missing)}."
            )
        self.stream = stream
        self.verify_crc = bool(verify_crc)

    def _name(self) -> str:
        return str(getattr(self.stream, "name", type(self.stream).__name__))

    def __iter__(self) -> TFRecordStreamReader:
        return self

    def __next__(self) -> bytes:
        stream = self.stream
        data = read_record(stream, self._name(), stream.tell(), self.verify_crc)
        if data is None:
            raise StopIteration
        return data

    def tell(self) -> int:
        """The byte offset of the next record."""
        return int(self.stream.tell())

    def seek(self, offset: int) -> None:
        """Moves to the record at byte `offset` (a value `tell` returned)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(
                f"`offset` must be an int >= 0 (a position tell() returned), got {offset!r}."
            )
        self.stream.seek(offset)

    def close(self) -> None:
        """Closes the stream."""
        self.stream.close()

    def __enter__(self) -> TFRecordStreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TFRecordStreamReader({self._name()!r})"
