"""MapDataset.batch over index arithmetic and an array source reads each batch stacked.

The gathered batches must be exactly the batches of the record-by-record path
(values, dtypes, structure), which an identity `map` before the batch forces.
"""

import collections

import numpy as np
import pytest

from grain_dataset import MapDataset, ReadOptions, assert_equal_output_after_checkpoint
from grain_sources import ArrayDataSource

Pair = collections.namedtuple("Pair", ["x", "y"])
N = 53
rng = np.random.default_rng(0)
IMAGES = rng.integers(0, 255, (N, 3, 2), dtype=np.uint8)
LABELS = np.arange(N, dtype=np.int64) * 7
WORDS = np.array([f"w{i}" for i in range(N)])


def _identity(record):
    return record


SOURCES = {
    "1-D array": lambda: LABELS,
    "3-D array": lambda: IMAGES,
    "dict of arrays": lambda: {"image": IMAGES, "label": LABELS},
    "ArrayDataSource tuple": lambda: ArrayDataSource((IMAGES, LABELS)),
    "ArrayDataSource nested": lambda: ArrayDataSource(
        {"a": Pair(IMAGES, LABELS), "b": [WORDS, LABELS.astype(np.float32)]}
    ),
}

CHAINS = {
    "plain": lambda ds: ds,
    "shuffle": lambda ds: ds.shuffle(seed=3),
    "slice": lambda ds: ds[5:47:3],
    "slice by indices": lambda ds: ds.slice([9, 2, 2, 40, 0]),
    "repeat": lambda ds: ds.shuffle(seed=1).repeat(3),
    "repeat without reseed": lambda ds: ds.shuffle(seed=1).repeat(2, reseed_each_epoch=False),
    "seed then shuffle": lambda ds: ds.seed(4).shuffle(),
    "mix": lambda ds: MapDataset.mix([ds.shuffle(seed=1), ds[10:30]], [0.6, 0.4]),
    "concatenate": lambda ds: MapDataset.concatenate([ds[:20], ds.shuffle(seed=2)]),
}


class _Rows:
    """The same records without `gather`: the record-by-record path, same pipeline depth."""

    def __init__(self, data):
        self._source = ArrayDataSource(data) if isinstance(data, dict) else data

    def __len__(self):
        return len(self._source)

    def __getitem__(self, index):
        return self._source[index]


def _pair(source, chain, size, drop):
    fast = chain(MapDataset.source(source())).batch(size, drop_remainder=drop)
    slow = chain(MapDataset.source(_Rows(source()))).batch(size, drop_remainder=drop)
    return fast, slow


def _assert_same(a, b):
    if isinstance(a, dict):
        assert isinstance(b, dict)
        assert list(a) == list(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, tuple | list):
        assert type(a) is type(b)
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert isinstance(a, np.ndarray)
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize(("size", "drop"), [(8, False), (8, True), (1, False), (60, False)])
def test_gathered_batches_equal_stacked_records(source, chain, size, drop):
    fast, slow = _pair(SOURCES[source], CHAINS[chain], size, drop)
    assert "gather=True" in repr(fast)
    assert "gather=True" not in repr(slow)
    assert len(fast) == len(slow)
    if not len(fast):  # e.g. fewer records than one batch with drop_remainder
        for ds in (fast, slow):
            with pytest.raises(IndexError, match="empty"):
                ds[0]
        return
    # Random access, across epochs (index >= len) and through the vectorized path.
    for index in [0, len(fast) - 1, len(fast), 2 * len(fast) + 1]:
        _assert_same(fast[index], slow[index])
    everything = np.arange(len(fast) + 3)
    for a, b in zip(fast._getitems(everything), slow._getitems(everything), strict=True):
        _assert_same(a, b)


@pytest.mark.parametrize("threads", [0, 4])
def test_iteration_and_checkpoints_through_the_gathered_path(threads):
    ds = (
        MapDataset.source({"image": IMAGES, "label": LABELS})
        .shuffle(seed=5)
        .repeat(2)
        .batch(4)
        .map(lambda b: {"image": b["image"].astype(np.float32) / 255, "label": b["label"]})
        .to_iter_dataset(ReadOptions(num_threads=threads))
    )
    assert_equal_output_after_checkpoint(ds, max_steps=30)
    slow = (
        MapDataset.source({"image": IMAGES, "label": LABELS})
        .map(_identity)
        .shuffle(seed=5)
        .repeat(2)
        .batch(4)
        .map(lambda b: {"image": b["image"].astype(np.float32) / 255, "label": b["label"]})
        .to_iter_dataset(ReadOptions(num_threads=threads))
    )
    for a, b in zip(ds, slow, strict=True):
        _assert_same(a, b)


def test_a_mixture_of_differently_typed_components_falls_back_to_stacking():
    ints = MapDataset.source(LABELS)
    floats = MapDataset.source(LABELS.astype(np.float64))
    fast = MapDataset.mix([ints, floats]).batch(6)
    slow = MapDataset.mix([ints.map(_identity), floats.map(_identity)]).batch(6)
    assert "gather=True" in repr(fast)  # decided statically, falls back at run time
    for k in range(len(fast)):
        _assert_same(fast[k], slow[k])


def test_what_does_not_gather():
    records = [{"x": np.zeros(2)} for _ in range(10)]
    assert "gather" not in repr(MapDataset.source(records).batch(2))
    assert "gather" not in repr(MapDataset.source(LABELS).map(_identity).batch(2))
    assert "gather" not in repr(MapDataset.source(LABELS).batch(2, batch_fn=list))
    objects = np.array([{"a": 1}] * 4, dtype=object)
    assert "gather" not in repr(MapDataset.source(objects).batch(2))


def test_worker_slices_gather_too():
    ds = MapDataset.source({"label": LABELS}).shuffle(seed=1)
    sharded = ds[1::3].batch(5)
    assert "gather=True" in repr(sharded)
    expected = [LABELS[ds._parent_indices(np.arange(N))][1::3][i : i + 5] for i in range(0, 18, 5)]
    for batch, labels in zip(sharded, expected, strict=True):
        np.testing.assert_array_equal(batch["label"], labels)


def test_the_cached_epoch_order_is_the_computed_one():
    import pickle

    n = 3000
    ds = MapDataset.range(n).shuffle(seed=9)
    reference = [ds[i] for i in range(2 * n)]  # scalar path, never cached
    # Many small vectorized reads: the order is cached part way through each epoch.
    read = []
    for start in range(0, 2 * n, 7):
        read.extend(ds._getitems(np.arange(start, min(start + 7, 2 * n), dtype=np.int64)))
    assert read == reference
    assert set(ds._permutations) <= {0, 1}
    assert ds._permutations  # the cache was used
    assert sorted(read[:n]) == list(range(n))
    assert read[:n] != read[n:]  # a new order each epoch
    copy = pickle.loads(pickle.dumps(ds))
    assert not copy._permutations  # caches do not travel to workers
    assert [copy[i] for i in range(50)] == reference[:50]
