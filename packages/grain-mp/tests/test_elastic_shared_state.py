"""ElasticIterator over a one-to-one pipeline: one state for all shards, Grain's shape.

Every shard's `get_state()` is the same dict after the same steps (Grain's
``{"global_next_index": g}``), names no shard (the constructor gives the shard at
restore), and any one of them restores every shard of a run with another shard
count, continuing exactly where the old run stopped.
"""

import asyncio

import numpy as np
import pytest

from grain_dataset import MapDataset
from grain_index import ShardOptions
from grain_mp import ElasticIterator, MultiprocessingOptions

pytestmark = pytest.mark.timeout(120)


def _ds():
    return MapDataset.range(97).shuffle(seed=2).map(lambda x: x * 10)


def _shards(count, batch, workers=0):
    options = MultiprocessingOptions(num_workers=workers) if workers else None
    return [
        ElasticIterator(_ds(), batch, ShardOptions(i, count), multiprocessing_options=options)
        for i in range(count)
    ]


def _positions(state):
    # The fingerprint is the dataset layer's business (it may travel beside the dict).
    return {key: value for key, value in state.items() if key != "grain_fingerprint"}


@pytest.mark.parametrize("workers", [0, 2])
def test_every_shard_has_the_same_state_naming_no_shard(workers):
    shards = _shards(3, 12, workers)
    for step in range(4):
        states = [it.get_state() for it in shards]
        # Grain's dict exactly: the pipeline's fingerprint travels in checkpoint files.
        assert states == [{"global_next_index": 12 * step}] * 3
        for it in shards:
            next(it)
    for it in shards:
        it.close()


def _read_all(shards):
    """The elements of `shards`, step by step, until a shard has no whole batch left."""
    out = []
    while True:
        try:
            batches = [np.asarray(next(it)).tolist() for it in shards]
        except StopIteration:
            return out
        out.extend(x for batch in batches for x in batch)


def test_one_shards_state_restores_all_shards_of_another_count_exactly():
    ds = _ds()
    old = _shards(4, 8)
    delivered = [x for _ in range(3) for it in old for x in np.asarray(next(it)).tolist()]
    state = old[2].get_state()  # any one host's
    for it in old:
        it.close()
    assert sorted(delivered) == sorted(ds[k] for k in range(24))
    new = _shards(3, 6)
    for it in new:
        it.set_state(state)
    # The 73 positions left make 12 steps of 6; the last one is a partial step, dropped.
    assert sorted(_read_all(new)) == sorted(ds[k] for k in range(24, 96))


def test_owed_positions_travel_in_the_shared_state_until_read():
    # Shards that stopped apart at the data's end: shards 0 and 1 read two batches of 2,
    # shard 2 one (its third element, 8, is owed). The next run's state carries the owed
    # positions, and its shards read 8 first.
    ds = MapDataset.range(11)
    old = [ElasticIterator(ds, 6, ShardOptions(i, 3)) for i in range(3)]
    seen = [x for it in old for batch in it for x in np.asarray(batch).tolist()]
    assert sorted(seen) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10]
    states = [it.get_state() for it in old]
    assert [_positions(state) for state in states] == [
        {"global_next_index": 12},
        {"global_next_index": 12},
        {"global_next_index": 6},
    ]
    new = [ElasticIterator(ds, 1, ShardOptions(0, 1))]
    new[0].set_state(states[::-1])  # in any order
    assert _positions(new[0].get_state())["leftovers"]  # 8 (and 11, past the end) owed
    assert np.asarray(next(new[0])).tolist() == [8]


def test_a_checkpoint_file_of_another_pipeline_is_refused(tmp_path):
    # The dict has Grain's shape; the fingerprint is written beside it in the file.
    (it,) = _shards(1, 12)
    next(it)
    asyncio.run(it.save(tmp_path))
    assert "grain_fingerprint" in (tmp_path / "process_0-of-1.json").read_text()
    same = ElasticIterator(_ds(), 12, ShardOptions(0, 1))
    asyncio.run(same.load(tmp_path))
    assert same.get_state() == {"global_next_index": 12}
    other = ElasticIterator(MapDataset.range(97).shuffle(seed=3), 12, ShardOptions(0, 1))
    with pytest.raises(ValueError, match="saved from a different pipeline"):
        asyncio.run(other.load(tmp_path))
    for x in (it, same, other):
        x.close()
