"""ArrayRecordDataSource over URLs: our own reader of the format, over range reads.

`ArrayRecordDataSource` hands every source whose paths include a URL
(``s3://``, ``gs://``, any fsspec protocol), or that is given ``filesystem=``,
to `RemoteArrayRecordDataSource`: the C++ reader reads only local files (it
reports 0 records, without an error, for an ``s3://`` path or a missing object).

Index math: as for local files, the files' record counts are summed once
(`_ends`); within a file the footer index (`_array_record_index.FileIndex`)
maps a record to its chunk by a binary search of cumulative record counts.
``__getitems__`` finds the distinct chunks of a batch (``np.unique``), reads
the uncached ones in one concurrent `ObjectStore.read_many`, and slices the
records out, so a batch costs one round trip however many records it holds.

Chunks of more than one record (group_size > 1) are kept in a small LRU cache
bounded in bytes, so neighbouring records do not re-read and re-decompress
their chunk. Pickling keeps the URLs, every file's index and the store's
settings: workers open no footer again.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from grain_sources import _riegeli
from grain_sources._array_record import ArrayRecordDataSource
from grain_sources._array_record_index import FileIndex, open_index
from grain_sources._checks import record_index, record_indices
from grain_sources._file_index import by_file, locate
from grain_sources._local_files import LocalFiles
from grain_sources._object_store import ObjectStore, RetryPolicy, default_store, protocol_of
from grain_sources._paths import expand_urls

_log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 64 << 20
_OPEN_THREADS = 16


class _ChunkCache:
    """Decoded chunks (values and record bounds) by (file, chunk), at most `budget` bytes."""

    def __init__(self, budget: int):
        self._budget = budget
        self._bytes = 0
        self._items: collections.OrderedDict[tuple[int, int], tuple[bytes, list[int]]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int]) -> tuple[bytes, list[int]] | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[int, int], item: tuple[bytes, list[int]]) -> None:
        size = len(item[0])
        if size > self._budget:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = item
            self._bytes += size
            while self._bytes > self._budget:
                _, old = self._items.popitem(last=False)
                self._bytes -= len(old[0])


class RemoteArrayRecordDataSource(ArrayRecordDataSource):
    """The records of ArrayRecord objects read by URL (see `ArrayRecordDataSource`).

    It reads with our own reader of the format over `ObjectStore` range reads;
    nothing of the C++ reader (nor its `reader_options`) is used. Beyond the
    arguments of `ArrayRecordDataSource` it takes:

      verify_hashes: check every chunk against its HighwayHash (default True;
        False saves the hashing: about 250 µs per KiB for a chunk read alone,
        about 10 µs per KiB for the chunks of a batch, hashed together).
      cache_bytes: the budget of the cache of decoded chunks (group_size > 1).
      coalesce_gap_bytes: chunks of one batch at most this many bytes apart are
        read as one request (0: only touching chunks; None: never).
    """

    def __init__(
        self,
        paths: Any,
        reader_options: Any = None,
        *,
        filesystem: Any = None,
        retry: RetryPolicy | None = None,
        verify_hashes: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        coalesce_gap_bytes: int | None = 0,
    ):
        del reader_options  # options of the C++ reader
        urls = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        protocols = {protocol_of(os.fspath(url)) for url in urls}
        if len(protocols) > 1:
            raise ValueError(
                f"`paths` mixes URL protocols {sorted(protocols)}: one source reads one "
                "store; mix sources with grain.MapDataset.mix or concatenate."
            )
        protocol = protocols.pop() if protocols else "file"
        self._store: Any
        if protocol == "file" and filesystem is None and retry is None:
            # Local paths (array_record missing): positional reads, no fsspec, no thread.
            self._store = LocalFiles()
        elif filesystem is None and retry is None:
            self._store = default_store(protocol)
        else:
            self._store = ObjectStore(protocol, filesystem=filesystem, retry=retry)
        self._verify = bool(verify_hashes)
        self._cache_bytes = int(cache_bytes)
        self._gap = coalesce_gap_bytes
        files = expand_urls(urls, self._store)
        with concurrent.futures.ThreadPoolExecutor(min(_OPEN_THREADS, len(files))) as pool:
            indexes = list(pool.map(lambda url: open_index(self._store, url, self._verify), files))
        for index in indexes:
            if index.max_group_size > 1:
                _log.info(
                    "%s has chunks of up to %d records: a random read moves the whole chunk "
                    "(cached); write with group_size:1 for random access.",
                    index.url,
                    index.max_group_size,
                )
        self._setup_indexes(tuple(indexes))

    def _setup_indexes(self, indexes: tuple[FileIndex, ...]) -> None:
        self._indexes = indexes
        self._files = tuple(index.url for index in indexes)
        # Files whose chunks hold several records: their chunks are worth caching.
        self._grouped = [index.max_group_size > 1 for index in indexes]
        counts = np.array([index.num_records for index in indexes], dtype=np.int64)
        self._ends = np.cumsum(counts)
        self._starts = self._ends - counts
        self._length = int(self._ends[-1]) if len(indexes) else 0
        self._cache = _ChunkCache(self._cache_bytes)
        self._closed = False

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([record_index(index, self._length, self)])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at `indices`; each chunk they touch is read once, all concurrently."""
        if self._closed:
            raise ValueError(f"{self!r} is closed: create a new source to read again.")
        indices = record_indices(indices, self._length, self)
        if not indices.size:
            return []
        files, chunks, within = self._locate(indices)
        # One key per (file, chunk): files < 2**20 keeps it exact in int64.
        keys = files * (1 << 43) + chunks
        unique, inverse = np.unique(keys, return_inverse=True)
        decoded = self._chunks((unique >> 43).tolist(), (unique & ((1 << 43) - 1)).tolist())
        out = []
        for which, record in zip(inverse.tolist(), within.tolist(), strict=True):
            values, bounds = decoded[which]
            out.append(values[bounds[record] : bounds[record + 1]])
        return out

    def _locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per index (checked, >= 0): its file, its chunk there, its record in that chunk."""
        files, local = locate(self._ends, self._starts, indices)
        chunks = np.empty_like(indices)
        within = np.empty_like(indices)
        for file, group in by_file(files):
            ends = self._indexes[file].record_ends
            found = np.searchsorted(ends, local[group], side="right")
            chunks[group] = found
            within[group] = local[group] - np.where(found > 0, ends[found - 1], 0)
        return files, chunks, within

    def _chunks(self, files: list[int], chunks: list[int]) -> list[tuple[bytes, list[int]]]:
        found: list[tuple[bytes, list[int]] | None] = [
            self._cache.get(key) for key in zip(files, chunks, strict=True)
        ]
        missing = [i for i, item in enumerate(found) if item is None]
        requests = []
        for i in missing:
            index = self._indexes[files[i]]
            begin, end = int(index.offsets[chunks[i]]), int(index.offsets[chunks[i] + 1])
            requests.append((index.url, begin, end - begin))
        raws = [
            _riegeli.strip_block_headers(raw, begin)
            for (_, begin, _), raw in zip(
                requests, self._store.read_many(requests, self._gap), strict=True
            )
        ]
        if self._verify:
            # All hashes of the batch at once; parse_chunk then trusts them.
            _riegeli.verify_chunks(
                raws, [url for url, _, _ in requests], [begin for _, begin, _ in requests]
            )
        for i, (url, begin, _), raw in zip(missing, requests, raws, strict=True):
            chunk = _riegeli.parse_chunk(raw, url, begin, verify=False)
            values, bounds = _riegeli.simple_chunk_records(chunk, url, begin)
            item = (values, bounds.tolist())
            if self._grouped[files[i]]:
                self._cache.put((files[i], chunks[i]), item)
            found[i] = item
        return found  # type: ignore[return-value]

    def read_ahead(
        self, indices: Sequence[int] | np.ndarray, budget_bytes: int = 64 << 20
    ) -> Iterator[bytes]:
        """The records at `indices`, in order, read ahead within `budget_bytes`.

        The index stream is known in advance (a shuffle's permutation, a
        sampler's order), so the reads are decided before the records are
        needed: the indices are cut into windows of about ``budget_bytes / 2``
        of chunk bytes (from the footer index, vectorized), and the next window
        is read (one concurrent, coalesced round trip) while the current one is
        consumed. At most two windows are held: memory stays within the budget
        whatever the record sizes. Closing the iterator stops reading ahead.
        """
        indices = record_indices(indices, self._length, self)
        if not indices.size:
            return
        files, chunks, _ = self._locate(indices)
        cost = np.empty(indices.size, np.int64)
        for file in np.unique(files).tolist():
            where = files == file
            cost[where] = np.diff(self._indexes[file].offsets)[chunks[where]]
        window = max(1, budget_bytes // 2)
        cuts = np.flatnonzero(np.diff(np.cumsum(cost) // window)) + 1
        windows = np.split(indices, cuts)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ahead = pool.submit(self.__getitems__, windows[0])
            try:
                for following in [*windows[1:], None]:
                    records = ahead.result()
                    if following is not None:
                        ahead = pool.submit(self.__getitems__, following)
                    yield from records
            finally:
                ahead.cancel()

    @property
    def store(self) -> Any:
        """The range-read layer this source reads through (`LocalFiles` for local paths)."""
        return self._store

    def close(self) -> None:
        """Drops the chunk cache; later reads raise."""
        self._closed = True
        self._cache = _ChunkCache(0)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "indexes": self._indexes,
            "store": self._store,
            "verify": self._verify,
            "cache_bytes": self._cache_bytes,
            "gap": self._gap,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._store = state["store"]
        self._verify = state["verify"]
        self._cache_bytes = state["cache_bytes"]
        self._gap = state["gap"]
        self._setup_indexes(state["indexes"])
