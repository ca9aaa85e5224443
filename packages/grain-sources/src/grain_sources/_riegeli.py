"""The Riegeli/records container, read from bytes: block headers, chunks, simple chunks.

Written from the public format description (riegeli's
``doc/riegeli_records_file_format.md``):

* a file is a sequence of chunks; at every multiple of 64 KiB a 24-byte block
  header interrupts whatever chunk is there (a chunk that starts exactly at a
  block boundary starts *with* that block header);
* a chunk is a 40-byte header (header hash, data size, data hash, type byte +
  7-byte record count, decoded size) followed by its data and padding;
* a simple chunk (type ``r``) holds a compression byte, the varint size of the
  compressed record sizes, the record sizes (varints) and the record values,
  each compressed buffer prefixed by its decompressed size unless uncompressed.

Hashes are HighwayHash-64 (`_highwayhash`); a mismatch means corruption.
Everything here works on bytes already read, so the same code serves local files
and range reads from object stores.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import numpy as np

from grain_sources._checks import UnreadableFileError
from grain_sources._hash_combiner import COMBINER
from grain_sources._highwayhash import hash64

BLOCK_SIZE = 1 << 16
BLOCK_HEADER_SIZE = 24
USABLE_BLOCK_SIZE = BLOCK_SIZE - BLOCK_HEADER_SIZE
CHUNK_HEADER_SIZE = 40

SIMPLE_CHUNK = ord("r")
TRANSPOSED_CHUNK = ord("t")
_HEADER = struct.Struct("<QQQQQ")
_COMPRESSIONS = {0: "uncompressed", ord("b"): "brotli", ord("z"): "zstd", ord("s"): "snappy"}
_INSTALL = "pip install grain-sources[cloud]"


def physical_end(begin: int, logical_size: int) -> int:
    """The file position after `logical_size` bytes of chunk starting at `begin`.

    Block headers at every 64 KiB boundary in between (and at `begin` itself when
    it is a boundary) add 24 bytes each.
    """
    overhead = (logical_size + (begin + USABLE_BLOCK_SIZE - 1) % BLOCK_SIZE) // USABLE_BLOCK_SIZE
    return begin + logical_size + overhead * BLOCK_HEADER_SIZE


def strip_block_headers(data: bytes | memoryview, begin: int) -> bytes | memoryview:
    """`data` read from file position `begin`, without the block headers inside it."""
    first = -(-begin // BLOCK_SIZE) * BLOCK_SIZE
    if first >= begin + len(data):
        return data
    view = memoryview(data)
    parts = [view[: first - begin]]
    for boundary in range(first, begin + len(data), BLOCK_SIZE):
        start = boundary - begin + BLOCK_HEADER_SIZE
        parts.append(view[start : start + USABLE_BLOCK_SIZE])
    return b"".join(parts)


class Chunk:
    """One chunk's header fields and its (hash-checked) data."""

    __slots__ = ("chunk_type", "data", "decoded_size", "num_records")

    def __init__(
        self, chunk_type: int, num_records: int, decoded_size: int, data: bytes | memoryview
    ):
        self.chunk_type = chunk_type
        self.num_records = num_records
        self.decoded_size = decoded_size
        self.data = data


def parse_chunk(raw: bytes | memoryview, name: str, position: int, verify: bool = True) -> Chunk:
    """The chunk at the start of `raw` (block headers already removed).

    Raises UnreadableFileError naming `name` and `position` when the chunk is
    truncated or a hash does not match.
    """
    if len(raw) < CHUNK_HEADER_SIZE:
        raise UnreadableFileError(
            f"{name!r}: the chunk at byte {position} is truncated ({len(raw)} of "
            f"{CHUNK_HEADER_SIZE} header bytes): the object is cut short or not ArrayRecord."
        )
    header_hash, data_size, data_hash, type_and_count, decoded_size = _HEADER.unpack_from(raw)
    if verify and hash64(memoryview(raw)[8:CHUNK_HEADER_SIZE]) != header_hash:
        raise UnreadableFileError(
            f"{name!r}: the chunk header at byte {position} has a wrong hash: the object is "
            "corrupt, was changed after the source was created, or is not ArrayRecord."
        )
    data = raw[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + data_size]
    if len(data) != data_size:
        raise UnreadableFileError(
            f"{name!r}: the chunk at byte {position} needs {data_size} data bytes, only "
            f"{len(data)} were there: the object is cut short."
        )
    if verify and hash64(data) != data_hash:
        raise UnreadableFileError(
            f"{name!r}: the data of the chunk at byte {position} has a wrong hash: the object "
            "is corrupt or was changed after the source was created."
        )
    return Chunk(type_and_count & 0xFF, type_and_count >> 8, decoded_size, data)


def verify_chunks(raws: list[bytes | memoryview], name: list[str], position: list[int]) -> None:
    """Checks the header and data hashes of many chunks at once (`hash64_many`).

    `raws` are chunks without block headers, as `parse_chunk` takes them; the
    first one that fails raises the error `parse_chunk` would. Chunks that other
    threads verify at the same moment are hashed in the same call (`_hash_combiner`).
    """
    headers = [memoryview(raw)[8:CHUNK_HEADER_SIZE] for raw in raws]
    fields = [_HEADER.unpack_from(raw) for raw in raws if len(raw) >= CHUNK_HEADER_SIZE]
    if len(fields) != len(raws):
        return  # parse_chunk names the truncated one
    datas = [
        memoryview(raw)[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + field[1]]
        for raw, field in zip(raws, fields, strict=True)
    ]
    hashes = COMBINER.hash(headers + datas)
    count = len(raws)
    for i, field in enumerate(fields):
        if hashes[i] != field[0] or hashes[count + i] != field[2]:
            parse_chunk(raws[i], name[i], position[i], verify=True)


def decode_varints(buffer: Any) -> np.ndarray:
    """Every varint64 in `buffer`, in order, as uint64 (vectorized; no per-value loop)."""
    return varints_at(buffer)[0]


def varints_at(buffer: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every varint64 in `buffer` as uint64, and the byte offset where each starts."""
    data = np.frombuffer(buffer, dtype=np.uint8)
    if not data.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    ends = np.flatnonzero(data < 0x80)
    if not ends.size or ends[-1] != data.size - 1:
        raise ValueError("the buffer ends inside a varint")
    starts = np.concatenate(([0], ends[:-1] + 1))
    # Byte k of a varint carries bits 7k .. 7k+6.
    place = np.arange(data.size) - np.repeat(starts, ends - starts + 1)
    if place.max() > 9:
        raise ValueError("a varint is longer than 10 bytes")
    parts = (data & 0x7F).astype(np.uint64) << (7 * place).astype(np.uint64)
    return np.add.reduceat(parts, starts), starts


def read_varint(data: Any, position: int = 0) -> tuple[int, int]:
    """The one varint64 at `position` of `data`, and the position after it.

    For single fields (a size prefix, a proto tag); `varints_at` decodes many.
    """
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("a varint runs past its buffer")
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        shift += 7
        if byte < 0x80:
            return value, position


def _zstd_module() -> Any:
    """PEP 784's zstd module (3.14's `compression.zstd`, or `backports.zstd`), or None.

    cramjam has no free-threaded wheel; backports.zstd has, so zstd chunks (the
    ArrayRecord default) decode there without cramjam.
    """
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _decompress(kind: int, buffer: memoryview) -> bytes:
    if kind == 0:
        return bytes(buffer)
    size, body_start = read_varint(buffer)
    body = buffer[body_start:]
    try:
        import cramjam
    except ImportError as error:
        zstd = _zstd_module() if kind == ord("z") else None
        if zstd is None:
            fix = (
                # zstd is ArrayRecord's default: the C++ reader, or a zstd module, reads it.
                "pip install 'grain-sources[arrayrecord]' (the C++ reader) or "
                "'grain-sources[arrayrecord-pure]' (zstd for this reader), or " + _INSTALL
                if kind == ord("z")
                else _INSTALL
            )
            raise ImportError(
                f"{_COMPRESSIONS.get(kind, kind)}-compressed ArrayRecord chunks need cramjam: {fix}"
            ) from error
        try:
            result = zstd.decompress(body)
        except zstd.ZstdError as error:
            raise ValueError(f"zstd data does not decompress: {error}") from None
    else:
        codecs = {
            ord("z"): cramjam.zstd.decompress,
            ord("b"): cramjam.brotli.decompress,
            ord("s"): cramjam.snappy.decompress_raw,
        }
        try:
            result = bytes(codecs[kind](body, output_len=size))
        except cramjam.DecompressionError as error:
            raise ValueError(f"{_COMPRESSIONS[kind]} data does not decompress: {error}") from None
    if len(result) != size:
        raise ValueError(f"decompressed {len(result)} bytes, the chunk says {size}")
    return result


def simple_chunk_records(chunk: Chunk, name: str, position: int) -> tuple[bytes, np.ndarray]:
    """The values buffer of a simple chunk and the record boundaries in it.

    Record i is ``values[bounds[i]:bounds[i + 1]]``.
    """
    if chunk.chunk_type == TRANSPOSED_CHUNK:
        raise UnreadableFileError(
            f"{name!r} was written with transpose:true, which this reader does not decode: "
            "rewrite it without transpose (grain convert writes group_size:1 files), or read "
            "a local copy with the C++ reader."
        )
    if chunk.chunk_type != SIMPLE_CHUNK:
        raise UnreadableFileError(
            f"{name!r}: the chunk at byte {position} is of type {chunk.chunk_type:#x}, not a "
            "chunk of records: the footer index points at the wrong place (corrupt file)."
        )
    data = memoryview(chunk.data)
    try:
        kind = data[0]
        if kind not in _COMPRESSIONS:
            raise ValueError(f"unknown compression type {kind:#x}")
        sizes_size, sizes_start = read_varint(data, 1)
        sizes = _decompress(kind, data[sizes_start : sizes_start + sizes_size])
        values = _decompress(kind, data[sizes_start + sizes_size :])
        if chunk.num_records == 1:
            # A chunk of one record (group_size:1, random access): no arrays to build.
            size, end = read_varint(sizes)
            if end != len(sizes):
                raise ValueError("more than one record size for one record")
            bounds = np.array([0, size], np.int64)
        else:
            lengths = decode_varints(sizes).astype(np.int64)
            if lengths.size != chunk.num_records:
                raise ValueError(f"{lengths.size} record sizes for {chunk.num_records} records")
            bounds = np.concatenate(([0], np.cumsum(lengths)))
        if bounds[-1] != len(values) or len(values) != chunk.decoded_size:
            raise ValueError("the record sizes do not add up to the values")
    except (ValueError, IndexError) as error:
        raise UnreadableFileError(
            f"{name!r}: the chunk at byte {position} does not decode ({error}): the object is "
            "corrupt."
        ) from None
    return values, bounds
