"""MapDataset.source reads ``source[i]``, as Grain does, unless the source declares batched reads.

A user source's `__getitems__` may be missing, broken (tfds.testing.mock_data's
raises TypeError) or may return something else than ``source[i]``; none of
that may change what a pipeline reads. A source whose class declares
``batched_reads = True`` is asked for many records per call instead.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from grain_dataset import MapDataset, ReadOptions
from grain_sources import ArrayDataSource

N = 24


class Records:
    """Record i is ``{"i": i, "x": 3 * i}``; counts the reads of each kind."""

    def __init__(self, n=N):
        self._n = n
        self._lock = threading.Lock()
        self.one = 0
        self.many = []

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        if not 0 <= index < self._n:
            raise IndexError(index)
        with self._lock:
            self.one += 1
        return {"i": index, "x": 3 * index}


class Different(Records):
    """A `__getitems__` that returns other records than `__getitem__`."""

    def __getitems__(self, indices):
        with self._lock:
            self.many.append(list(indices))
        return [{"i": -1, "x": -1} for _ in indices]


class Broken(Records):
    """The shape of tfds.testing.mock_data's: every call raises TypeError."""

    def __getitems__(self, indices):
        with self._lock:
            self.many.append(list(indices))
        raise TypeError("_getitems() missing 1 required positional argument: 'record_keys'")


class Declared(Records):
    batched_reads = True

    def __getitems__(self, indices):
        with self._lock:
            self.many.append(list(indices))
        return [{"i": i, "x": 3 * i} for i in indices]


def _add(record):
    return {"i": record["i"], "x": record["x"] + 1}


def _pipelines():
    """name -> (pipeline of a source, how many elements to read)."""
    return {
        "getitem": lambda s: [MapDataset.source(s)[i] for i in (0, 5, N - 1, N + 2)],
        "slice": lambda s: list(MapDataset.source(s)[3:11]),
        "iterate": lambda s: list(MapDataset.source(s)),
        "batch": lambda s: [MapDataset.source(s).batch(5)[k] for k in range(5)],
        "shuffle_map_batch": lambda s: list(
            MapDataset.source(s).shuffle(seed=3).map(_add).batch(4, drop_remainder=True)
        ),
        "threads": lambda s: list(
            MapDataset.source(s).shuffle(seed=5).to_iter_dataset(ReadOptions(num_threads=2))
        ),
        "threads_batch": lambda s: list(
            MapDataset.source(s)
            .map(_add)
            .to_iter_dataset(ReadOptions(num_threads=2, prefetch_buffer_size=4))
            .batch(5)
        ),
        "no_threads": lambda s: list(
            MapDataset.source(s).to_iter_dataset(ReadOptions(num_threads=0))
        ),
        "repeat_slice_batch": lambda s: list(MapDataset.source(s).repeat(2)[10:40].batch(7)),
    }


def _plain(value):
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    return value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(_pipelines()))
@pytest.mark.parametrize("kind", [Different, Broken], ids=["different", "broken"])
def test_an_undeclared_getitems_is_never_called(kind, name):
    run = _pipelines()[name]
    expected = _plain(run(Records()))
    source = kind()
    assert _plain(run(source)) == expected
    assert source.many == [], "the undeclared __getitems__ was called"
    assert source.one > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["batch", "shuffle_map_batch", "threads", "threads_batch"])
def test_a_declared_getitems_reads_many_records_per_call(name):
    run = _pipelines()[name]
    expected = _plain(run(Records()))
    source = Declared()
    assert _plain(run(source)) == expected
    assert source.one == 0, "records were read one by one despite the declaration"
    assert source.many
    assert max(len(call) for call in source.many) > 1


def test_a_batch_of_a_declared_source_is_one_call():
    source = Declared()
    batch = MapDataset.source(source).shuffle(seed=1).batch(6)[2]
    assert source.many == [batch["i"].tolist()]
    assert source.one == 0


def test_the_decision_is_made_once_per_source():
    source = Declared()
    ds = MapDataset.source(source)
    # Withdrawing the declaration later does not change a dataset already built.
    type(source).batched_reads = False
    try:
        ds.batch(4)[0]
        assert source.many == [[0, 1, 2, 3]]
        fresh = Declared()
        MapDataset.source(fresh).batch(4)[0]
        assert fresh.many == []
        assert fresh.one == 4
    finally:
        type(source).batched_reads = True


def test_a_declaration_without_getitems_is_refused_when_the_dataset_is_built():
    class Promises(Records):
        batched_reads = True

    with pytest.raises(TypeError, match="defines no `__getitems__"):
        MapDataset.source(Promises())


class Gathers(Records):
    """A `gather` method that is not grain's stacked read, undeclared."""

    def gather(self, indices):
        raise AssertionError("gather of an undeclared source was called")


def test_an_undeclared_gather_is_never_called():
    ds = MapDataset.source(Gathers()).batch(4)
    assert "gather=True" not in repr(ds)
    assert ds[1]["i"].tolist() == [4, 5, 6, 7]


def test_a_subclass_that_changes_the_records_is_not_gathered():
    class Labelled(ArrayDataSource):
        def __getitem__(self, index):
            return {"x": super().__getitem__(index), "label": 7}

    ds = MapDataset.source(Labelled(np.arange(10) * 2)).batch(4)
    assert "gather=True" not in repr(ds)
    batch = ds[1]
    assert batch["x"].tolist() == [8, 10, 12, 14]
    assert batch["label"].tolist() == [7, 7, 7, 7]
    # Ours and numpy arrays keep the stacked read.
    assert "gather=True" in repr(MapDataset.source(ArrayDataSource(np.arange(10))).batch(4))
    assert "gather=True" in repr(MapDataset.source(np.arange(10)).batch(4))
