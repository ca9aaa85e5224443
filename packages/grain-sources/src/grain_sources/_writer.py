"""write_array_record: how users (and the demo) make ArrayRecord files.

Records are written with ``group_size:1`` so that every record can be read on
its own. A write goes to temporary names first and is renamed only when every
shard is complete, so an error never leaves a partial dataset behind.

Writing needs array_record's C++ writer (``grain-sources[arrayrecord]``); it is
imported when a write starts, so that the package imports without it.
"""

from __future__ import annotations

import operator
import os
import pickle
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from grain_sources._array_record import INSTALL_EXTENSION
from grain_sources._paths import PathLike, shard_name
from grain_sources._progress import Progress

DEFAULT_WRITER_OPTIONS = "group_size:1"


def _pickle(record: Any) -> bytes:
    return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)


_SERIALIZERS: dict[str, Callable[[Any], bytes]] = {"pickle": _pickle}


def write_array_record(
    records: Iterable[Any],
    path: PathLike,
    *,
    num_shards: int = 1,
    serializer: str | Callable[[Any], bytes] | None = None,
    options: str = DEFAULT_WRITER_OPTIONS,
    progress: bool | None = None,
) -> list[str]:
    """Writes `records` into `num_shards` ArrayRecord files; returns their paths.

    Args:
      records: bytes-like records, or any records when `serializer` is given.
      path: the file to write; with ``num_shards > 1`` the base name of the
        shards ``path-00000-of-00004`` ..., which ``ArrayRecordDataSource(
        f"{path}@{num_shards}")`` reads back.
      num_shards: how many files. A sized input (a list, a numpy array) is cut
        into contiguous blocks, so the global index of each record is its
        position in `records`; an input without ``len`` is dealt round robin
        (record i to shard ``i % num_shards``).
      serializer: None (records must be bytes-like), ``"pickle"`` (any
        picklable record, numpy arrays included; read back with
        ``.map(pickle.loads)``), or a function from a record to bytes.
      options: ArrayRecordWriter options; keep ``group_size:1`` for random access.
      progress: show a progress line on stderr for long writes; None shows it
        when stderr is a terminal.

    Raises:
      TypeError: a record is not bytes (its position and type are named).
      FileNotFoundError: the directory of `path` does not exist.
      ImportError: array_record (the C++ writer) is not installed.
    """
    try:
        from array_record.python.array_record_module import ArrayRecordWriter
    except ImportError as error:
        raise ImportError(
            f"write_array_record needs array_record's C++ writer: {INSTALL_EXTENSION}.",
            name="array_record",
        ) from error
    if isinstance(num_shards, bool) or not hasattr(num_shards, "__index__"):
        raise TypeError(f"`num_shards` must be an integer >= 1, got {num_shards!r}.")
    num_shards = operator.index(num_shards)
    if num_shards < 1:
        raise ValueError(f"`num_shards` must be an integer >= 1, got {num_shards!r}.")
    encode = _serializer(serializer)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"the directory of `path` {path!r} does not exist: create it first."
        )
    if os.path.isdir(path):
        raise IsADirectoryError(f"`path` {path!r} is a directory: pass a file name in it.")
    finals = (
        [path] if num_shards == 1 else [shard_name(path, i, num_shards) for i in range(num_shards)]
    )
    # Unique per call, so concurrent writes of one path never share a temporary file.
    suffix = f".tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    temps = [final + suffix for final in finals]
    writers: list[Any] = []
    meter = Progress(f"writing {path}", progress)
    try:
        for temp in temps:
            writer = ArrayRecordWriter(temp, options)
            writers.append(writer)
            if not writer.ok():
                raise OSError(f"cannot write {temp!r}: check permissions and free space.")
        block = _block_size(records, num_shards)
        for position, record in enumerate(records):
            data = record if encode is None else encode(record)
            if not isinstance(data, bytes):
                data = _as_bytes(data, position, serializer is not None)
            shard = min(position // block, num_shards - 1) if block else position % num_shards
            writers[shard].write(data)
            meter.add(len(data))
        for writer in writers:
            if not writer.ok():
                raise OSError(f"writing {path!r} failed: check free space.")
            writer.close()
        for temp, final in zip(temps, finals, strict=True):
            os.replace(temp, final)
    except BaseException:
        for writer in writers:
            if writer.is_open():
                writer.close()
        for temp in temps:
            if os.path.exists(temp):
                os.remove(temp)
        raise
    finally:
        meter.finish()
    return finals


def _serializer(serializer: Any) -> Callable[[Any], bytes] | None:
    if serializer is None or callable(serializer):
        return serializer
    try:
        return _SERIALIZERS[serializer]
    except (KeyError, TypeError):
        raise ValueError(
            "`serializer` must be None, 'pickle' or a function returning bytes, "
            f"got {serializer!r}."
        ) from None


def _block_size(records: Any, num_shards: int) -> int:
    """Records per shard for a sized input; 0 means round robin."""
    if num_shards == 1:
        return 0
    try:
        total = len(records)
    except TypeError:
        return 0
    return max(1, -(-total // num_shards))


def _as_bytes(data: Any, position: int, serialized: bool) -> bytes:
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if serialized:
        raise TypeError(
            f"the serializer returned {type(data).__name__} for record {position}: it must "
            "return bytes."
        )
    raise TypeError(
        f"record {position} is {type(data).__name__}, not bytes: encode records to bytes, or "
        "pass serializer='pickle' (or a function returning bytes)."
    )
