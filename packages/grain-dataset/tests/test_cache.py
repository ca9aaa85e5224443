"""CachedMapDataset: each cached index is computed once, across threads, within the bound.

A counting map before the cache records how often the parent computes each
index. The cache must: return the parent's elements; compute each index once
(also when threads ask for it at the same time); evict the least recently
used beyond `max_elements`; cache only the first epoch unless the parent is
declared epoch-invariant; never cache an error.
"""

import collections
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from grain_dataset import MapDataset, ReadOptions, assert_equal_output_after_checkpoint
from grain_dataset._map_stages._cache import CachedMapDataset


class Counter:
    """A map function that counts its calls per element, thread-safely."""

    def __init__(self, delay: float = 0.0):
        self.calls = collections.Counter()
        self._lock = threading.Lock()
        self._delay = delay

    def __call__(self, x):
        with self._lock:
            self.calls[x] += 1
        if self._delay:
            time.sleep(self._delay)
        return x * 10


def counted(n: int = 10, delay: float = 0.0):
    counter = Counter(delay)
    return MapDataset.range(n).map(counter), counter


def test_returns_the_parents_elements_and_computes_each_once():
    parent, counter = counted(10)
    ds = CachedMapDataset(parent)
    assert len(ds) == 10
    assert [ds[i] for i in range(10)] == [10 * i for i in range(10)]
    assert list(ds) == [10 * i for i in range(10)]
    assert ds._getitems(np.array([3, 3, 9, 0], dtype=np.int64)) == [30, 30, 90, 0]
    assert ds[-1] == 90
    assert counter.calls == dict.fromkeys(range(10), 1)


def test_getitems_calls_the_parent_once_for_all_misses():
    parent, _ = counted(10)
    ds = CachedMapDataset(parent)
    ds[2]
    seen = []
    original = parent._getitems

    def spy(indices):
        seen.append(indices.tolist())
        return original(indices)

    parent._getitems = spy
    assert ds._getitems(np.array([1, 2, 5, 1, 7], dtype=np.int64)) == [10, 20, 50, 10, 70]
    assert seen == [[1, 5, 7]]


def test_threaded_read_ahead_computes_each_index_once():
    parent, counter = counted(200)
    ds = CachedMapDataset(parent, epoch_invariant=True).repeat(3)
    out = list(ds.to_iter_dataset(ReadOptions(num_threads=4)))
    assert out == [10 * (i % 200) for i in range(600)]
    assert counter.calls == dict.fromkeys(range(200), 1)


def test_concurrent_requests_for_the_same_index_wait_instead_of_recomputing():
    parent, counter = counted(40, delay=0.002)
    ds = CachedMapDataset(parent)
    rng = np.random.default_rng(0)
    requests = [rng.integers(0, 40, size=12).astype(np.int64) for _ in range(32)]

    def read(indices):
        if len(indices) % 2:
            return [ds[i] for i in indices.tolist()]
        return ds._getitems(indices)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(read, requests))
    for indices, values in zip(requests, results, strict=True):
        assert values == (indices * 10).tolist()
    assert set(counter.calls.values()) == {1}


def test_bound_evicts_the_least_recently_used():
    parent, counter = counted(10)
    ds = CachedMapDataset(parent, max_elements=2)
    ds[0], ds[1], ds[0], ds[2]  # 1 is the least recently used when 2 arrives
    assert counter.calls == {0: 1, 1: 1, 2: 1}
    ds[0]  # still cached
    assert counter.calls[0] == 1
    ds[1]  # evicted: computed again, evicting 2
    assert counter.calls[1] == 2
    ds[2]
    assert counter.calls[2] == 2
    assert len(ds._cache) == 2


def test_bound_applies_to_batched_reads():
    parent, counter = counted(10)
    ds = CachedMapDataset(parent, max_elements=3)
    assert ds._getitems(np.arange(10, dtype=np.int64)) == [10 * i for i in range(10)]
    assert list(ds._cache) == [7, 8, 9]
    ds._getitems(np.array([8, 0], dtype=np.int64))
    assert counter.calls[8] == 1
    assert counter.calls[0] == 2


def test_later_epochs_are_read_through_by_default():
    counter = Counter()
    parent = MapDataset.range(5).shuffle(seed=3).map(counter)
    ds = CachedMapDataset(parent)
    assert [ds[i] for i in range(5, 15)] == [parent[i] for i in range(5, 15)]
    # Epochs 1 and 2 differ from epoch 0 (reshuffled) and are not cached.
    assert [ds[i] for i in range(5, 10)] != [ds[i] for i in range(5)]
    assert len(ds._cache) == 5
    assert ds._getitems(np.arange(3, 8, dtype=np.int64)) == [parent[i] for i in range(3, 8)]


def test_epoch_invariant_serves_later_epochs_from_the_cache():
    parent, counter = counted(5)
    ds = CachedMapDataset(parent, epoch_invariant=True)
    assert [ds[i] for i in range(5, 15)] == [10 * (i % 5) for i in range(5, 15)]
    assert ds._getitems(np.arange(20, 30, dtype=np.int64)) == [10 * (i % 5) for i in range(10)]
    assert counter.calls == dict.fromkeys(range(5), 1)


def test_shuffle_after_the_cache_reorders_cached_elements():
    parent, counter = counted(20)
    ds = CachedMapDataset(parent, epoch_invariant=True).shuffle(seed=1).repeat(2)
    out = list(ds)
    assert sorted(out[:20]) == sorted(out[20:]) == [10 * i for i in range(20)]
    assert out[:20] != out[20:]
    assert counter.calls == dict.fromkeys(range(20), 1)


def test_filtered_positions_are_cached_as_none():
    counter = Counter()
    ds = CachedMapDataset(MapDataset.range(6).map(counter).filter(lambda x: x % 20 == 0))
    assert list(ds) == [0, 20, 40]
    assert ds[1] is None
    assert set(counter.calls.values()) == {1}


def test_infinite_parent_caches_by_index():
    parent, counter = counted(3)
    ds = CachedMapDataset(parent.repeat())
    assert [ds[i] for i in (0, 3, 0, 3)] == [0, 0, 0, 0]
    assert counter.calls == {0: 2}


def test_errors_are_not_cached():
    failures = {"left": 1}

    def flaky(x):
        if x == 2 and failures["left"]:
            failures["left"] -= 1
            raise OSError("transient")
        return x

    ds = CachedMapDataset(MapDataset.range(4).map(flaky))
    with pytest.raises(OSError, match="transient"):
        ds._getitems(np.arange(4, dtype=np.int64))
    assert not ds._pending
    assert ds._getitems(np.arange(4, dtype=np.int64)) == [0, 1, 2, 3]
    failures["left"] = 1
    ds2 = CachedMapDataset(MapDataset.range(4).map(flaky))
    with pytest.raises(OSError, match="transient"):
        ds2[2]
    assert ds2[2] == 2


def test_pickles_without_its_cache():
    ds = CachedMapDataset(MapDataset.range(5), max_elements=4)
    list(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy._cache) == 0
    assert list(copy) == [0, 1, 2, 3, 4]
    assert len(copy._cache) == 4


def test_checkpoint_conformance():
    ds = CachedMapDataset(MapDataset.range(30).map(lambda x: x * x), max_elements=8)
    assert_equal_output_after_checkpoint(ds.to_iter_dataset(ReadOptions(num_threads=2)))


def test_repr_names_the_options():
    assert "max_elements=3" in repr(CachedMapDataset(MapDataset.range(2), 3))


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_elements"):
        CachedMapDataset(MapDataset.range(3), max_elements=0)
    with pytest.raises(TypeError, match="max_elements"):
        CachedMapDataset(MapDataset.range(3), max_elements="10")
    with pytest.raises(TypeError, match="epoch_invariant"):
        CachedMapDataset(MapDataset.range(3), epoch_invariant=1)
    with pytest.raises(TypeError, match="parent"):
        CachedMapDataset(MapDataset.range(3).to_iter_dataset())
    with pytest.raises(IndexError):
        CachedMapDataset(MapDataset.range(0))[0]
