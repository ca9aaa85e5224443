"""`CachedMapDataset`: a MapDataset that computes each of its parent's elements once.

Put it after expensive, deterministic work (decoding, parsing, a remote read)
that fits in memory, so later reads of the same index, in this epoch or in
later ones, are dictionary look-ups.

What is cached, and under which key, follows from what an index means.
Indices ``>= len(ds)`` are later epochs, and the parent's element there can
differ from the first epoch's: a shuffle reorders, a `random_map` draws new
numbers, a `map_with_index` sees a new index. So by default only the first
epoch (indices ``< len(ds)``) is cached, keyed by its index, and later epochs
are read from the parent every time. Pass ``epoch_invariant=True`` when the
parent gives the same element at ``i`` and ``i + k * len(ds)`` (a source
followed by maps and filters, no shuffle, random_map or map_with_index):
then index ``i`` is cached under ``i % len(ds)`` and every epoch after the
first is served from the cache. Put a shuffle *after* the cache, so the cache
holds the deterministic elements and the shuffle reorders them per epoch.

Memory: without `max_elements` the cache holds one epoch of elements (for an
infinite parent: every index read, with no bound). With `max_elements` it
keeps the most recently used ones and evicts the least recently used (LRU).

Threads: `to_iter_dataset` reads with a thread pool, so the cache is guarded
by a lock, and an index that one thread is computing is awaited by the others
rather than computed again: the parent computes each cached index once (while
it stays cached). The lock is held only for dictionary operations, never
while the parent computes. An element that raised is not cached; the next
read tries again.

Cached elements are returned as they are, not copied: stages after the cache
must not modify elements in place (return new arrays instead), or they would
modify the cache. Worker processes (`mp_prefetch`) each get an empty cache of
their own: the cache is not pickled with the dataset.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from grain_dataset._core._base import MapDataset
from grain_dataset._core._stage import MapStage, is_infinite
from grain_index import checks


class CachedMapDataset(MapStage):
    """The parent's elements, each computed once and then served from memory.

    Args:
      parent: the MapDataset to cache, usually right after expensive work.
      max_elements: keep at most this many elements, evicting the least
        recently used; None (the default) keeps all it caches.
      epoch_invariant: set True only if the parent's element at index ``i``
        is the same in every epoch (no shuffle, random_map or map_with_index
        before the cache); later epochs are then served from the cache too.
        By default only the first epoch is cached.

    Example::

        ds = grain.MapDataset.source(paths).map(decode_image)
        ds = CachedMapDataset(ds, epoch_invariant=True).shuffle(seed=0).repeat(10)
        # decode_image runs once per path, not once per path and epoch.
    """

    def _fingerprint_token(self) -> str | None:
        return None

    def __init__(
        self,
        parent: MapDataset[Any],
        max_elements: int | None = None,
        *,
        epoch_invariant: bool = False,
    ):
        if not isinstance(parent, MapDataset):
            raise TypeError(
                f"CachedMapDataset: `parent` must be a MapDataset, got {type(parent).__name__}."
            )
        super().__init__(parent)
        if max_elements is not None:
            max_elements = checks.int_in_range(max_elements, "max_elements", 1)
        if not isinstance(epoch_invariant, bool):
            raise TypeError(f"`epoch_invariant` must be a bool, got {epoch_invariant!r}.")
        self._parent = parent
        self._length = len(parent)
        self._max_elements = max_elements
        self._epoch_invariant = epoch_invariant
        self._init_cache()

    def _init_cache(self) -> None:
        # Ordered by last use: the first entry is the one to evict.
        self._cache: collections.OrderedDict[int, Any] = collections.OrderedDict()
        # Indices being computed, by the thread that claimed them.
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A lock cannot be pickled, and a worker process is better off filling
        # its own cache than receiving a copy of this one.
        state = self.__dict__.copy()
        for name in ("_cache", "_pending", "_lock"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_cache()

    def __len__(self) -> int:
        return self._length

    def _key(self, index: int) -> int | None:
        """The cache key of `index`, or None where the index is not cached."""
        if self._epoch_invariant or is_infinite(self._length):
            return index % self._length if self._length else index
        return index if index < self._length else None

    def _store(self, key: int, value: Any) -> None:
        """Caches `value` (the lock is held) and evicts beyond `max_elements`."""
        self._cache[key] = value
        if self._max_elements is not None and len(self._cache) > self._max_elements:
            self._cache.popitem(last=False)

    def _getitem(self, index: int) -> Any:
        key = self._key(index)
        if key is None:
            return self._parent._getitem(index)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            future = self._pending.get(key)
            owner = future is None
            if owner:
                future = self._pending[key] = Future()
        assert future is not None
        if not owner:
            return future.result()
        return self._compute({key: future}, np.array([index], dtype=np.int64), [key])[0]

    def _compute(
        self, claimed: dict[int, Future], indices: np.ndarray, keys: list[int]
    ) -> list[Any]:
        """Reads `indices` (whose keys this thread claimed) from the parent and caches them."""
        try:
            values = self._parent._getitems(indices)
        except BaseException as error:
            with self._lock:
                for key in keys:
                    del self._pending[key]
            for future in claimed.values():
                future.set_exception(error)
            raise
        with self._lock:
            for key, value in zip(keys, values, strict=True):
                self._store(key, value)
                del self._pending[key]
        for key, value in zip(keys, values, strict=True):
            claimed[key].set_result(value)
        return values

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        if self._epoch_invariant and self._length and not is_infinite(self._length):
            keys = (indices % self._length).tolist()
        else:
            keys = [self._key(index) for index in indices.tolist()]
        results: list[Any] = [None] * len(keys)
        waiting: list[tuple[int, Future]] = []
        uncached: list[int] = []  # positions read from the parent without caching
        claimed: dict[int, Future] = {}
        claimed_positions: dict[int, int] = {}  # key -> first position that reads it
        with self._lock:
            for position, key in enumerate(keys):
                if key is None:
                    uncached.append(position)
                elif key in self._cache:
                    self._cache.move_to_end(key)
                    results[position] = self._cache[key]
                elif key in claimed:
                    waiting.append((position, claimed[key]))  # a repeat within this call
                elif key in self._pending:
                    waiting.append((position, self._pending[key]))
                else:
                    claimed[key] = self._pending[key] = Future()
                    claimed_positions[key] = position
        # One parent call for everything this thread computes, so a vectorized
        # parent stays vectorized behind the cache.
        if claimed:
            first_positions = list(claimed_positions.values())
            computed = self._compute(claimed, indices[first_positions], list(claimed))
            for position, value in zip(first_positions, computed, strict=True):
                results[position] = value
        if uncached:  # later epochs of an epoch-dependent parent: read through
            values = self._parent._getitems(indices[uncached])
            for position, value in zip(uncached, values, strict=True):
                results[position] = value
        for position, future in waiting:
            results[position] = future.result()
        return results

    def _describe(self) -> str:
        return f"max_elements={self._max_elements}, epoch_invariant={self._epoch_invariant}"
