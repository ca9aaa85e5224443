"""One shard of a conversion plan, written idempotently: what every executor runs.

The task reads its pieces, applies the transform, encodes each record, and
writes them to ``SHARD.tmp-<pid>-<random>``. It then reads the file back and
checks the record count and a checksum over the records (SHA-256 over each
record's 8-byte little-endian length and bytes, in order), syncs it to disk
and renames it to its final name; the per-record lengths, if asked for, are
committed the same way before it. Last comes the marker ``SHARD.done``, a JSON
file with the shard's plan hash, count and checksum: a shard is done when its
marker is. A task killed at any point leaves at most a temporary file (which
the next run removes) or a finished shard without a marker (which it
rewrites); never a half-written file under the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from grain_convert._array_record import array_record_module
from grain_convert._errors import ConversionError
from grain_convert._plan import write_json
from grain_convert._read import WHERE, decode_json_line, read_piece, row_encoder

MARKER_SUFFIX = ".done"
LENGTHS_SUFFIX = ".lengths.npy"
_VERIFY_CHUNK = 8192
_REPORT_EVERY_S = 0.5


class FieldLength:
    """``len(example[field])``: the per-record length of one field (e.g. a token list)."""

    def __init__(self, field: str):
        self.field = field

    def __call__(self, example: Any) -> int:
        return len(example[self.field])

    def __repr__(self) -> str:
        return f"len(record[{self.field!r}])"


def record_checksum() -> Any:
    return hashlib.sha256()


def add_record(checksum: Any, data: bytes) -> None:
    """Adds one record to a running checksum: its length, then its bytes (so that
    moving bytes from one record to the next changes the checksum)."""
    checksum.update(len(data).to_bytes(8, "little"))
    checksum.update(data)


def run_shard(
    job: dict[str, Any],
    shard: dict[str, Any],
    report: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Writes, checks and commits one shard; returns its marker (also written to disk).

    `job` holds the plan's settings, the output directory, and the transform
    and length function pickled (or None). `report(records)` is called about
    twice a second with the number of records written so far.
    """
    settings = job["settings"]
    final = os.path.join(job["directory"], shard["name"])
    temp = f"{final}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    transform = pickle.loads(job["transform"]) if job["transform"] else None
    length_of = pickle.loads(job["lengths"]) if job["lengths"] else None
    checksum = record_checksum()
    lengths: list[int] = []
    count = 0
    record_bytes = 0
    writer = array_record_module("writing ArrayRecord files").ArrayRecordWriter(
        temp, settings["writer_options"]
    )
    try:
        if not writer.ok():
            raise ConversionError(f"cannot write {temp}: check permissions and free space")
        last_report = time.monotonic()
        for data, length in _records(settings, shard, transform, length_of):
            writer.write(data)
            add_record(checksum, data)
            count += 1
            record_bytes += len(data)
            if length_of is not None:
                lengths.append(length)
            if report is not None and not count & 1023:
                now = time.monotonic()
                if now - last_report >= _REPORT_EVERY_S:
                    last_report = now
                    report(count)
        if not writer.ok():
            raise ConversionError(f"writing {temp} failed: check free space")
        writer.close()
        expected = shard["stop"] - shard["start"]
        if count != expected:
            raise ConversionError(
                f"{shard['name']}: the plan has {expected} records for it and {count} were "
                "read: an input file changed since the plan was made; convert again"
            )
        _verify(temp, count, checksum.hexdigest())
        _sync(temp)
        marker: dict[str, Any] = {
            "shard": shard["name"],
            "hash": shard["hash"],
            "records": count,
            "checksum": checksum.hexdigest(),
            "bytes": os.path.getsize(temp),
            "record_bytes": record_bytes,
            "lengths": None,
        }
        if length_of is not None:
            marker["lengths"] = _commit_lengths(final, lengths)
        os.replace(temp, final)
    except BaseException:
        if writer.is_open():
            writer.close()
        if os.path.exists(temp):
            os.remove(temp)
        raise
    write_json(final + MARKER_SUFFIX, marker)
    if report is not None:
        report(count)
    return marker


def _records(
    settings: dict[str, Any],
    shard: dict[str, Any],
    transform: Callable[[Any], Any] | None,
    length_of: Callable[[Any], int] | None,
) -> Any:
    """(bytes to store, length or 0) for every record of the shard, in order."""
    kind = settings["format"]
    encode = row_encoder(settings["row_format"])
    decode_first = kind == "jsonl" and (transform is not None or length_of is not None)
    for piece in shard["pieces"]:
        path = piece["path"]
        for number, value in read_piece(kind, path, piece):

            def where(number: int = number, path: str = path) -> str:
                return WHERE[kind].format(number, path)

            example = value
            if kind == "jsonl":
                # Every line is checked to be JSON, as it is stored as is.
                parsed = decode_json_line(value, where)
                if decode_first:
                    example = parsed
            if transform is not None:
                try:
                    example = transform(example)
                except Exception as error:
                    raise ConversionError(
                        f"the transform raised {type(error).__name__} on {where()}: {error}"
                    ) from error
            length = 0
            if length_of is not None:
                try:
                    length = int(length_of(example))
                except Exception as error:
                    raise ConversionError(
                        f"the length of {where()} ({length_of!r}) failed: "
                        f"{type(error).__name__}: {error}"
                    ) from None
            if kind == "jsonl" and transform is None:
                data = value
            elif isinstance(example, bytes):
                data = example
            else:
                data = encode(example, where)
            yield data, length


def file_checksum(path: str) -> tuple[int, str]:
    """The record count and the records' checksum of the ArrayRecord file at `path`."""
    reader = array_record_module("reading ArrayRecord files").ArrayRecordReader(
        path, "max_parallelism:1"
    )
    try:
        count = reader.num_records()
        checksum = record_checksum()
        for begin in range(0, count, _VERIFY_CHUNK):
            for data in reader.read(begin, min(begin + _VERIFY_CHUNK, count)):
                add_record(checksum, data)
    finally:
        reader.close()
    return count, checksum.hexdigest()


def _verify(path: str, count: int, checksum: str) -> None:
    """Reads the file back: the count and the checksum must be what was written."""
    found, again = file_checksum(path)
    if found != count or again != checksum:
        raise ConversionError(
            f"{path} does not read back as written ({found} of {count} records, checksum "
            f"{'matches' if again == checksum else 'differs'}): check the disk"
        )


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit_lengths(final: str, lengths: list[int]) -> dict[str, Any]:
    array = np.asarray(lengths, dtype=np.int64)
    path = final + LENGTHS_SUFFIX
    temp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        with open(temp, "wb") as file:
            np.save(file, array)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return {
        "file": os.path.basename(path),
        "sum": int(array.sum()),
        "min": int(array.min()) if len(array) else 0,
        "max": int(array.max()) if len(array) else 0,
    }


def read_marker(final: str) -> dict[str, Any] | None:
    """The marker of the shard at `final`, or None if there is none (or it is unreadable)."""
    try:
        with open(final + MARKER_SUFFIX, encoding="utf-8") as file:
            marker = json.load(file)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None
