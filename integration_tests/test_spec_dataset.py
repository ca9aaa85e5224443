"""The Dataset calls of the spec's tutorials and API reference, through `import grain`.

Each test runs a document's code as a user would (only the parts that need
TFDS, Orbax or JAX are left to the layers that bring them) and checks what the
document says the output is.
"""

import pprint
import sys

import numpy as np
import pytest


def test_basic_tutorial_map_dataset(capsys):
    import grain.python as grain

    dataset = (
        grain.MapDataset.source([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        .shuffle(seed=10)
        .map(lambda x: x + 1)
        .batch(batch_size=2)
    )
    pprint.pprint(dataset[0])
    batches = list(dataset)
    assert sorted(np.concatenate(batches).tolist()) == list(range(1, 12))
    assert [len(b) for b in batches] == [2, 2, 2, 2, 2, 1]

    class MySource(grain.RandomAccessDataSource):
        def __init__(self):
            self._data = [0, 1, 2, 3, 4, 5, 6, 7]

        def __getitem__(self, idx):
            return self._data[idx]

        def __len__(self):
            return len(self._data)

    source = MySource()
    dataset = grain.MapDataset.source(source).shuffle(seed=10).map(lambda x: x + 1).batch(2)
    assert sorted(np.concatenate(list(dataset)).tolist()) == list(range(1, 9))

    # Access past the length is a later epoch, shuffled differently.
    later = dataset[len(dataset) + 2]
    assert later.shape == (2,)
    epoch0 = np.concatenate([dataset[i] for i in range(len(dataset))])
    epoch1 = np.concatenate([dataset[len(dataset) + i] for i in range(len(dataset))])
    assert sorted(epoch1.tolist()) == sorted(epoch0.tolist())
    assert epoch1.tolist() != epoch0.tolist()

    filtered_dataset = dataset.filter(lambda e: (e[0] + e[1]) % 2 == 0)
    pprint.pprint(f"Length of this dataset: {len(filtered_dataset)}")
    elements = [filtered_dataset[i] for i in range(len(filtered_dataset))]
    for element, batch in zip(elements, (dataset[i] for i in range(len(dataset))), strict=True):
        if (batch[0] + batch[1]) % 2 == 0:
            assert np.array_equal(element, batch)
        else:
            assert element is None

    shard_index, shard_count = 0, 2
    sharded_dataset = dataset[shard_index::shard_count]
    assert len(sharded_dataset) == 2
    assert np.array_equal(sharded_dataset[1], dataset[2])

    iter_dataset = sharded_dataset.to_iter_dataset(
        grain.ReadOptions(num_threads=16, prefetch_buffer_size=500)
    )
    got = list(iter_dataset)
    assert all(np.array_equal(a, b) for a, b in zip(got, [dataset[0], dataset[2]], strict=True))

    dataset_iter = iter(dataset)
    assert isinstance(dataset_iter, grain.DatasetIterator)
    next(dataset_iter)
    checkpoint = dataset_iter.get_state()
    second = next(dataset_iter)
    dataset_iter.set_state(checkpoint)
    assert np.array_equal(next(dataset_iter), second)
    capsys.readouterr()


def test_api_reference_examples():
    import grain

    MapDataset, IterDataset = grain.MapDataset, grain.IterDataset  # noqa: N806 - as the docs spell them
    assert list(MapDataset.concatenate([MapDataset.range(3), MapDataset.range(3, 8)])) == list(
        range(8)
    )
    assert list(MapDataset.mix([MapDataset.range(5), MapDataset.range(7, 10)])) == [
        0, 7, 1, 8, 2, 9,
    ]  # fmt: skip
    for args in [(5,), (2, 9), (2, 20, 3), (10, 0, -3)]:
        assert list(MapDataset.range(*args)) == list(range(*args))
    assert list(MapDataset.source([1, 2, 3, 4, 5])) == [1, 2, 3, 4, 5]
    batches = list(MapDataset.range(5).batch(batch_size=2))
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    ds = MapDataset.range(5).filter(lambda x: x % 2 == 0)
    assert ds[2] == 2
    assert ds[1] is None
    assert list(ds) == [0, 2, 4]
    assert list(MapDataset.range(5).map(lambda x: x + 10)) == [10, 11, 12, 13, 14]
    ds = MapDataset.source(["a", "b", "c", "d"]).map_with_index(lambda i, x: x + str(i))
    assert list(ds) == ["a0", "b1", "c2", "d3"]
    ds = MapDataset.range(5).seed(0).random_map(lambda x, rng: x + rng.integers(5, 10))
    assert set(ds).issubset(set(range(5, 15)))
    assert list(MapDataset.range(5).repeat(2)) == [0, 1, 2, 3, 4] * 2
    ds = MapDataset.range(5).repeat()
    assert len(ds) == sys.maxsize
    assert ds[11111] == 1
    ds = MapDataset.range(5).seed(0).shuffle()
    assert set(ds) == {0, 1, 2, 3, 4}
    assert list(MapDataset.range(5).slice(slice(1, 3))) == [1, 2]
    assert list(MapDataset.range(5).slice(slice(1, None, 2))) == [1, 3]
    assert list(MapDataset.range(9).slice(slice(1, 10, 2))) == list(MapDataset.range(9)[1:10:2])

    ds1 = MapDataset.range(5).to_iter_dataset()
    ds2 = MapDataset.range(7, 10).to_iter_dataset()
    assert list(IterDataset.mix([ds1, ds2])) == [0, 7, 1, 8, 2, 9, 3]
    ds = MapDataset.range(5).to_iter_dataset()
    assert [b.tolist() for b in ds.batch(batch_size=2)] == [[0, 1], [2, 3], [4]]
    assert list(ds.filter(lambda x: x % 2 == 0)) == [0, 2, 4]
    assert list(ds.map(lambda x: x + 10)) == [10, 11, 12, 13, 14]
    pairs = list(ds.map_with_index(lambda i, x: (i, 2**x)))
    assert pairs == [(0, 1), (1, 2), (2, 4), (3, 8), (4, 16)]
    ds = ds.seed(1).random_map(lambda x, rng: x + rng.integers(5, 10))
    assert set(ds).issubset(set(range(5, 15)))


def test_api_reference_seed_examples():
    import grain

    def shuffled(ds):
        return list(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))

    def noise(x, rng):
        return int(rng.integers(1 << 30))

    base = grain.MapDataset.range(50)
    # 1 and 2: one seed, distinct derived seeds per stage.
    ds = base.seed(7).shuffle().random_map(noise)
    assert shuffled(ds) == shuffled(base.seed(7).shuffle().random_map(noise))
    two = base.seed(7).random_map(noise).random_map(noise)
    assert shuffled(two) != shuffled(base.seed(7).random_map(noise))
    # 3: an explicit seed wins.
    assert shuffled(base.seed(1).random_map(noise, seed=5)) == shuffled(
        base.seed(2).random_map(noise, seed=5)
    )
    # 4: a later seed overrides for what follows only.
    a = base.seed(1).shuffle().seed(2).random_map(noise)
    b = base.seed(1).shuffle().seed(3).random_map(noise)
    c = base.seed(9).shuffle().seed(2).random_map(noise)
    assert shuffled(a) != shuffled(b)
    assert shuffled(a) == shuffled(c)  # the random_map depends on seed 2 only

    # 5: a mixture's random stage depends on both parents' seeds.
    def mixed(s1, s2):
        ds1 = base.seed(s1).shuffle()
        ds2 = base.seed(s2).shuffle()
        return shuffled(grain.MapDataset.mix([ds1, ds2]).random_map(noise))

    assert mixed(1, 2) == mixed(1, 2)
    assert mixed(1, 2) != mixed(1, 3)
    assert mixed(1, 2) != mixed(4, 2)
    with pytest.raises(ValueError, match=r"ds\.seed"):
        grain.MapDataset.range(5).shuffle()


def test_pipe_and_read_options():
    import grain

    def add(ds, amount):
        return ds.map(lambda x: x + amount)

    assert list(grain.MapDataset.range(3).pipe(add, amount=10)) == [10, 11, 12]
    ds = grain.MapDataset.range(100).to_iter_dataset(
        read_options=grain.ReadOptions(num_threads=32, prefetch_buffer_size=400)
    )
    assert list(ds) == list(range(100))
