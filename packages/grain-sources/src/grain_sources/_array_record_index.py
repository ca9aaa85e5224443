"""ArrayRecord files read over range reads: the footer index and record lookup.

An ArrayRecord file is a Riegeli file whose last 64 KiB block holds a
*postscript* chunk (three copies of a small proto naming the footer's offset),
and whose *footer* chunk, just before it, holds one metadata proto (version,
chunk and record counts) and one proto per data chunk: the chunk's offset,
decoded size and record count (array_record's public ``layout.proto``).

Opening a file costs two or three range reads: its size, the tail (postscript
and, usually, the footer) and the first bytes (the Riegeli signature, so that
another format fails clearly). The footer protos are decoded vectorized (they
are all varint fields). Data chunks are contiguous, so chunk c is the byte
range ``[offsets[c], offsets[c + 1])``: a record of a group_size:1 file is one
range read.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from grain_sources import _riegeli
from grain_sources._checks import UnreadableFileError
from grain_sources._object_store import ObjectStore

# The tail read at open: the postscript block plus, for most files, the whole footer.
_TAIL_BYTES = 1 << 20
_SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f00000000000000004000000000000000"
    "91bac23c9287e1a90000000000000000e19f13c0e9b1c372"
    "7300000000000000"
)


@dataclasses.dataclass(frozen=True)
class FileIndex:
    """Where the records of one ArrayRecord object are.

    Attributes:
      url: the object.
      size: its size in bytes.
      offsets: the byte offset of each data chunk, then the footer's offset.
      record_ends: the cumulative record count at the end of each chunk.
    """

    url: str
    size: int
    offsets: np.ndarray
    record_ends: np.ndarray

    @property
    def num_records(self) -> int:
        return int(self.record_ends[-1]) if self.record_ends.size else 0

    @property
    def max_group_size(self) -> int:
        return int(np.diff(self.record_ends, prepend=0).max()) if self.record_ends.size else 0


def _unreadable(url: str, why: str) -> UnreadableFileError:
    return UnreadableFileError(
        f"{url!r} is not a readable ArrayRecord file ({why}): it is corrupt, truncated or "
        "of another format."
    )


def _records(raw: bytes | memoryview, begin: int, url: str, verify: bool) -> list[bytes]:
    chunk = _riegeli.parse_chunk(_riegeli.strip_block_headers(raw, begin), url, begin, verify)
    values, bounds = _riegeli.simple_chunk_records(chunk, url, begin)
    return [values[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]


def _proto_varints(message: bytes) -> dict[int, int]:
    """The varint fields of a small proto message (other wire types are skipped)."""
    fields: dict[int, int] = {}
    position = 0
    while position < len(message):
        tag, position = _riegeli.read_varint(message, position)
        wire = tag & 7
        if wire == 0:
            fields[tag >> 3], position = _riegeli.read_varint(message, position)
        elif wire == 2:
            length, position = _riegeli.read_varint(message, position)
            fields[-(tag >> 3)] = position  # where the sub-message starts
            position += length
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return fields


def _footer_arrays(values: bytes, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chunk offsets and record counts from the footer protos (records 1 ..), vectorized."""
    first = int(bounds[1])
    numbers, starts = _riegeli.varints_at(memoryview(values)[first:])
    if numbers.size % 2 or (numbers[0::2] & 7).any():
        raise ValueError("the footer protos hold fields that are not varints")
    tags = numbers[0::2] >> 3
    fields = numbers[1::2].astype(np.int64)
    record = np.searchsorted(bounds[1:] - first, starts[0::2], side="right") - 1
    count = len(bounds) - 2
    out = []
    for field in (1, 3):  # chunk_offset, num_records
        where = tags == field
        if np.bincount(record[where], minlength=count).tolist() != [1] * count:
            raise ValueError(f"a footer proto lacks field {field}")
        column = np.empty(count, np.int64)
        column[record[where]] = fields[where]
        out.append(column)
    return out[0], out[1]


def open_index(store: ObjectStore, url: str, verify: bool = True) -> FileIndex:
    """Reads the footer of the ArrayRecord object at `url`."""
    size = store.size(url)
    if size == 0:
        raise UnreadableFileError(f"{url!r} is empty (0 bytes): it is not an ArrayRecord file.")
    if size < len(_SIGNATURE) + _riegeli.BLOCK_HEADER_SIZE + _riegeli.CHUNK_HEADER_SIZE:
        raise _unreadable(url, f"only {size} bytes")
    postscript = (size - 1) // _riegeli.BLOCK_SIZE * _riegeli.BLOCK_SIZE
    tail_start = min(postscript, max(0, size - _TAIL_BYTES))
    head, tail = store.read_many([(url, 0, len(_SIGNATURE)), (url, tail_start, size - tail_start)])
    if head != _SIGNATURE:
        raise _unreadable(url, "no Riegeli signature at its start")
    try:
        copies = _records(tail[postscript - tail_start :], postscript, url, verify)
        if not copies:
            raise ValueError("the postscript is empty")
        footer_offset = _proto_varints(copies[0]).get(1)
        if footer_offset is None or not 0 < footer_offset <= postscript:
            raise ValueError(f"the postscript names footer offset {footer_offset}")
        if footer_offset >= tail_start:
            footer_raw = tail[footer_offset - tail_start : postscript - tail_start]
        else:
            footer_raw = store.read(url, footer_offset, postscript - footer_offset)
        chunk = _riegeli.parse_chunk(
            _riegeli.strip_block_headers(footer_raw, footer_offset), url, footer_offset, verify
        )
        values, bounds = _riegeli.simple_chunk_records(chunk, url, footer_offset)
        if len(bounds) < 2:
            raise ValueError("the footer has no metadata")
        metadata = _proto_varints(values[: int(bounds[1])])
        inner = metadata.get(-1)
        info = _proto_varints(values[inner : int(bounds[1])]) if inner is not None else {}
        if len(bounds) > 2:
            offsets, counts = _footer_arrays(values, bounds)
        else:
            offsets = counts = np.zeros(0, np.int64)
    except (ValueError, IndexError) as error:
        if isinstance(error, UnreadableFileError):
            raise
        raise _unreadable(url, str(error)) from None
    if info.get(2, len(offsets)) != len(offsets) or info.get(3, counts.sum()) != counts.sum():
        raise _unreadable(url, "the footer's counts disagree with its chunk list")
    all_offsets = np.append(offsets, np.int64(footer_offset))
    if (np.diff(all_offsets) <= 0).any() or (offsets.size and offsets[0] < len(_SIGNATURE)):
        raise _unreadable(url, "the footer's chunk offsets are out of order")
    return FileIndex(url, size, all_offsets, np.cumsum(counts))
