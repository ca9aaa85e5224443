"""TFRecordDataSource: random access into TFRecord files, local or in a bucket, by an offset index.

TFRecord has no index: record i starts wherever the i-1 records before it end.
One sequential pass (framing only) finds every record's offset; the offsets are
kept in a *sidecar* file next to the data, ``<file>.offsets.npy`` (int64, one
offset per record and then the file size), written by `write_tfrecord_index`
(and by ``grain convert`` for its TFRecord inputs, from the pass that counts
them). A source whose sidecar is missing builds the index on first use, in
memory, and says how to keep it.

Record i is then one range read, ``[offsets[i], offsets[i + 1])``: its 12-byte
header, data and 4-byte footer, both checksums verified. A batch of records is
one concurrent `ObjectStore.read_many`. The sidecar must belong to the file:
offsets from 0, increasing, ending at the file's size, and the last record's
header (read at open) must fill the last place; otherwise (a damaged sidecar,
or a file changed since) it is rebuilt with a warning. A change that keeps
every record's place cannot be seen at open; a misplaced record still fails
when read, by its framing and checksums. Pickling keeps the URLs and offsets:
workers read no index again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import logging
import os
import struct
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from grain_sources._checks import NoSuchFileError, record_index, record_indices
from grain_sources._file_index import by_file, locate
from grain_sources._object_store import ObjectStore, protocol_of
from grain_sources._paths import expand, expand_urls
from grain_sources._range_file import remote, store_for
from grain_sources._tfrecord import (
    _HEADER,
    CorruptRecordError,
    TFRecordReader,
    masked_crc,
)

_log = logging.getLogger(__name__)
SIDECAR_SUFFIX = ".offsets.npy"


def _scan(path: str, store: ObjectStore | None) -> np.ndarray:
    """Every record's offset and the file size, by one pass over the framing."""
    filesystem = None if store is None else store._filesystem()
    reader = TFRecordReader(path, verify_crc=False, buffer_size=8 << 20, filesystem=filesystem)
    offsets = [0]
    with reader:
        for _ in reader:
            offsets.append(reader.position)
    return np.asarray(offsets, dtype=np.int64)


def write_tfrecord_index(
    path: str | os.PathLike[str], filesystem: Any = None, *, offsets: Any = None
) -> str:
    """Writes the sidecar offset index of the TFRecord file (or object) `path`; returns its name.

    Args:
      path: the TFRecord file or URL.
      filesystem: an fsspec filesystem to read and write with (URLs need none).
      offsets: every record's byte offset and then the file's size, when a pass
        over the file has already found them (``grain convert`` does); None
        scans the file. They are checked against the file as a source checks
        its sidecar.

    Example::

        write_tfrecord(records, "data.tfrecord")
        write_tfrecord_index("data.tfrecord")        # data.tfrecord.offsets.npy
    """
    text = os.fspath(path)
    store = store_for(text, filesystem) if remote(text, filesystem) else None
    if offsets is None:
        index = _scan(text, store)
    else:
        index = np.asarray(offsets, dtype=np.int64)
        why = _mismatch(index, text, store)
        if why:
            raise ValueError(
                f"`offsets` do not index {text!r}: {why}. Pass offsets=None to scan the file."
            )
    buffer = io.BytesIO()
    np.save(buffer, index)
    name = text + SIDECAR_SUFFIX
    if store is None:
        # Written whole under another name first: a reader never sees half a sidecar.
        partial = f"{name}.{os.getpid()}.partial"
        try:
            with open(partial, "wb") as file:
                file.write(buffer.getvalue())
            os.replace(partial, name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise
    else:
        store.put_bytes(name, buffer.getvalue())
    return name


def _mismatch(offsets: np.ndarray, path: str, store: ObjectStore | None) -> str:
    """Why `offsets` cannot be the index of the file at `path` ("" if they can be)."""
    size = os.path.getsize(path) if store is None else store.size(path)
    if offsets.ndim != 1 or not offsets.size or offsets[0] != 0:
        return "it is not a list of offsets from 0"
    if int(offsets[-1]) != size:
        return f"it ends at byte {int(offsets[-1])}, the file has {size} bytes"
    places = np.diff(offsets)
    if (places < _HEADER.size + 4).any():
        return "its offsets are not increasing by whole records"
    if not places.size:
        return ""
    # The last record's header must name the length of its place.
    last = int(offsets[-2])
    if store is None:
        with open(path, "rb") as file:
            file.seek(last)
            header = file.read(_HEADER.size)
    else:
        header = store.read(path, last, _HEADER.size)
    length, length_crc = _HEADER.unpack(header)
    if masked_crc(header[:8]) != length_crc or length + _HEADER.size + 4 != int(places[-1]):
        return f"the record at byte {last} does not fill the last place"
    return ""


def _load_index(path: str, store: ObjectStore | None) -> np.ndarray:
    name = path + SIDECAR_SUFFIX
    try:
        if store is None:
            with open(name, "rb") as file:
                data = file.read()
        else:
            data = store.read(name, 0, store.size(name))
    except (FileNotFoundError, NoSuchFileError):
        _log.warning(
            "%s has no offset index (%s): building it with one pass over the file; keep it "
            "with grain_sources.write_tfrecord_index(%r).",
            path,
            name,
            path,
        )
        return _scan(path, store)
    try:
        offsets = np.load(io.BytesIO(data), allow_pickle=False)
        why = _mismatch(offsets, path, store) if offsets.dtype.kind in "iu" else "not integers"
    except (ValueError, EOFError, struct.error) as error:
        why = f"not a .npy array ({error})"
    if why:
        _log.warning(
            "%s does not belong to %s (%s; the file changed, or the index is damaged): "
            "rebuilding it with one pass; write it again with "
            "grain_sources.write_tfrecord_index(%r).",
            name,
            path,
            why,
            path,
        )
        return _scan(path, store)
    return offsets.astype(np.int64, copy=False)


class TFRecordDataSource:
    """Records of TFRecord files by global index (local files or objects in a bucket).

    Args:
      paths: a file or URL, a glob, ``name@N``, or a list of them.
      filesystem: an fsspec filesystem to read with (URLs need none).
      verify_crc: check both checksums of every record read.

    Example::

        source = grain_sources.TFRecordDataSource("gs://bucket/train-*.tfrecord")
        ds = grain.MapDataset.source(source).shuffle(seed=0).map(parse_example)
    """

    # __getitems__ returns [self[i] for i in indices]: see RandomAccessDataSource.
    batched_reads: ClassVar[bool] = True

    def __init__(self, paths: Any, *, filesystem: Any = None, verify_crc: bool = True):
        listed = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        first = os.fspath(listed[0]) if listed else ""
        local = not remote(first, filesystem)
        self._store = ObjectStore("file") if local else store_for(first, filesystem)
        if local:
            self._files = tuple(expand(paths))
        else:
            if {protocol_of(os.fspath(path)) for path in listed} != {self._store.protocol}:
                raise ValueError("`paths` mixes URL protocols: one source reads one store.")
            self._files = tuple(expand_urls(listed, self._store))
            local = False
        self._verify = bool(verify_crc)
        store = None if local else self._store
        with concurrent.futures.ThreadPoolExecutor(min(16, len(self._files))) as pool:
            self._offsets = tuple(pool.map(lambda path: _load_index(path, store), self._files))
        counts = np.array([len(offsets) - 1 for offsets in self._offsets], dtype=np.int64)
        self._ends = np.cumsum(counts)
        self._starts = self._ends - counts
        self._length = int(self._ends[-1]) if len(counts) else 0

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([record_index(index, self._length, self)])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at `indices`, one concurrent round trip for all of them."""
        indices = record_indices(indices, self._length, self)
        files, local = locate(self._ends, self._starts, indices)
        begins = np.empty_like(indices)
        ends = np.empty_like(indices)
        for file, group in by_file(files):
            begins[group] = self._offsets[file][local[group]]
            ends[group] = self._offsets[file][local[group] + 1]
        requests = [
            (self._files[f], b, e - b)
            for f, b, e in zip(files.tolist(), begins.tolist(), ends.tolist(), strict=True)
        ]
        raws = self._store.read_many(requests)
        return [
            self._record(raw, url, begin)
            for raw, (url, begin, _) in zip(raws, requests, strict=True)
        ]

    def _record(self, raw: Any, url: str, begin: int) -> bytes:
        raw = bytes(raw)
        length, length_crc = _HEADER.unpack_from(raw)
        data = raw[_HEADER.size : _HEADER.size + length]
        if len(raw) != _HEADER.size + length + 4:
            raise CorruptRecordError(
                url,
                begin,
                "does not fill its place in the offset index",
                "The file changed after its index was written: delete the "
                f"{SIDECAR_SUFFIX} file (or write it again with write_tfrecord_index).",
            )
        if self._verify and (
            masked_crc(raw[:8]) != length_crc
            or masked_crc(data) != struct.unpack_from("<I", raw, _HEADER.size + length)[0]
        ):
            raise CorruptRecordError(url, begin, "has a wrong checksum")
        return data

    @property
    def paths(self) -> list[str]:
        """The files, in the order their records are numbered."""
        return list(self._files)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        count = "1 file" if len(self._files) == 1 else f"{len(self._files)} files"
        return f"TFRecordDataSource({count}: {self._files[0]!r}, len={self._length})"
