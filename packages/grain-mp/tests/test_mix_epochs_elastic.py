"""ElasticIterator over a MapDataset.mix read past its first mixed epoch.

The mix's components continue where they stopped at each mixed epoch (see
grain-dataset's test_mix_epochs.py); these tests check that the elastic
iterator's state, a position, restores exactly there, with worker processes
and on another shard count.
"""

import collections
import json

import numpy as np
import pytest

from grain_dataset import MapDataset
from grain_index import ShardOptions
from grain_mp import ElasticIterator, MultiprocessingOptions


def mixed(epochs):
    # Grain's example: the first mixed epoch reads 20 only; 21 and 22 come later.
    parts = [MapDataset.source([10, 11, 12]), MapDataset.source([20, 21, 22])]
    return MapDataset.mix(parts, [2, 1]).repeat(epochs)


def iterator(ds, shard_count, index, batch, workers=0):
    mp = MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2) if workers else None
    return ElasticIterator(
        ds, shard_count * batch, ShardOptions(index, shard_count), multiprocessing_options=mp
    )


def flat(batches):
    return [x for b in batches for x in np.asarray(b).tolist()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_every_state_of_one_shard_restores_past_the_first_mixed_epoch(workers):
    ds = mixed(4)
    batch = 3
    it = iterator(ds, 1, 0, batch, workers)
    batches, states = [], [it.get_state()]
    for b in it:
        batches.append(np.asarray(b).tolist())
        states.append(json.loads(json.dumps(it.get_state())))
    it.close()
    assert flat(batches) == [ds[i] for i in range(len(ds) - len(ds) % batch)]
    assert {21, 22} <= set(flat(batches))
    for step in range(0, len(states), 2):
        fresh = iterator(ds, 1, 0, batch, workers)
        fresh.set_state(states[step])
        assert [np.asarray(b).tolist() for b in fresh] == batches[step:], step
        fresh.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("old", "new"), [(2, 3), (3, 1)])
def test_resize_past_the_first_mixed_epoch_delivers_each_position_once(old, new):
    ds = mixed(6)
    iterators = [iterator(ds, old, i, 1) for i in range(old)]
    delivered = []
    for _ in range(3):  # 3 * old positions: past the first mixed epoch of 4
        for it in iterators:
            delivered.extend(np.asarray(next(it)).tolist())
    states = [it.get_state() for it in iterators]
    for it in iterators:
        it.close()
    for index in range(new):
        it = iterator(ds, new, index, 1)
        it.set_state(states[0])
        delivered.extend(flat(it))
        it.close()
    assert collections.Counter(delivered) == collections.Counter(ds[i] for i in range(len(ds)))
    # 24 positions hold the second component 8 times: 20, 21, 22 cycled, none restarted.
    assert collections.Counter(x for x in delivered if x >= 20) == {20: 3, 21: 3, 22: 2}
