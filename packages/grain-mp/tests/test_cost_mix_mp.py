"""Mixing by tokens (`costs=`) with worker processes and under ElasticIterator.

IterDataset.mix runs in each worker over the worker's slice of every
component, so each worker's output follows the token weights and their round
robin does too; MapDataset.mix by cost is pure index math, so ElasticIterator
restores it at any step and on another shard count.
"""

import collections
import json

import numpy as np
import pytest

from grain_dataset import IterDataset, MapDataset, assert_equal_output_after_checkpoint
from grain_index import ShardOptions
from grain_mp import ElasticIterator, MultiprocessingOptions

WEIGHTS = [0.5, 0.3, 0.2]


def _tokens(x):
    return x["n"]


def _corpus(seed=0, sizes=(300, 200, 100), means=(5, 15, 50)):
    rng = np.random.default_rng(seed)
    lengths = [
        rng.lognormal(np.log(m), 0.8, n).astype(np.int64) + 1
        for m, n in zip(means, sizes, strict=True)
    ]
    parts = [
        MapDataset.source([{"c": j, "i": i, "n": int(n)} for i, n in enumerate(lens)])
        for j, lens in enumerate(lengths)
    ]
    return parts, lengths


def _options(workers):
    return MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)


def _shares(elements):
    tokens = np.zeros(3)
    for x in elements:
        tokens[int(x["c"])] += int(x["n"])
    return tokens / tokens.sum()


def _iter_mix():
    parts, _ = _corpus()
    return IterDataset.mix([p.to_iter_dataset() for p in parts], WEIGHTS, costs=_tokens)


@pytest.mark.timeout(120)
def test_iter_mix_by_cost_with_workers_is_deterministic_and_follows_the_weights():
    ds = _iter_mix().mp_prefetch(_options(2))
    first, second = list(ds), list(ds)
    assert first == second
    pairs = [(x["c"], x["i"]) for x in first]
    assert len(set(pairs)) == len(pairs)  # nothing read twice
    assert np.abs(_shares(first) - WEIGHTS).max() < 0.05


@pytest.mark.timeout(180)
def test_iter_mix_by_cost_with_workers_restores_at_any_step():
    ds = _iter_mix().mp_prefetch(_options(2))
    assert_equal_output_after_checkpoint(ds, max_steps=120, steps=[0, 1, 7, 33, 64, 119])


def _elastic(ds, shard_count, index, batch, workers=0):
    mp = _options(workers) if workers else None
    return ElasticIterator(
        ds, shard_count * batch, ShardOptions(index, shard_count), multiprocessing_options=mp
    )


def _map_mix():
    parts, lengths = _corpus(1, sizes=(40, 30, 20))
    return (
        MapDataset.mix(parts, WEIGHTS, costs=lengths).repeat(3).map(lambda x: x["i"] * 10 + x["c"])
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_elastic_restores_a_map_mix_by_cost_at_every_step(workers):
    ds = _map_mix()
    it = _elastic(ds, 1, 0, 4, workers)
    batches, states = [], [it.get_state()]
    for b in it:
        batches.append(np.asarray(b).tolist())
        states.append(json.loads(json.dumps(it.get_state())))
    it.close()
    flat = [x for b in batches for x in b]
    assert flat == [ds[i] for i in range(len(flat))]
    for step in range(0, len(states), 5):
        fresh = _elastic(ds, 1, 0, 4, workers)
        fresh.set_state(states[step])
        assert [np.asarray(b).tolist() for b in fresh] == batches[step:], step
        fresh.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("old", "new"), [(2, 3), (3, 1)])
def test_elastic_resize_of_a_map_mix_by_cost_delivers_each_position_once(old, new):
    ds = _map_mix()
    iterators = [_elastic(ds, old, i, 1) for i in range(old)]
    delivered = []
    for _ in range(10):
        for it in iterators:
            delivered.extend(np.asarray(next(it)).tolist())
    states = [it.get_state() for it in iterators]
    for it in iterators:
        it.close()
    for index in range(new):
        it = _elastic(ds, new, index, 1)
        it.set_state(states[0])
        delivered.extend(x for b in it for x in np.asarray(b).tolist())
        it.close()
    assert collections.Counter(delivered) == collections.Counter(ds[i] for i in range(len(ds)))


@pytest.mark.timeout(60)
def test_elastic_restores_a_mix_with_new_weights_at_its_position_as_the_record_mix_does():
    # The one-to-one elastic state is Grain's {"global_next_index": n}: the new mix
    # continues at position n, for record and cost weights alike (docs/elastic.md).
    parts, lengths = _corpus(1, sizes=(40, 30, 20))
    for costs in (None, lengths):
        it = _elastic(MapDataset.mix(parts, WEIGHTS, costs=costs), 1, 0, 4)
        next(it)
        state = it.get_state()
        it.close()
        new = MapDataset.mix(parts, [0.2, 0.3, 0.5], costs=costs)
        fresh = _elastic(new, 1, 0, 4)
        fresh.set_state(state)
        rest = [x for b in fresh for x in np.asarray(b["i"]).tolist()]
        fresh.close()
        assert rest == [new[i]["i"] for i in range(4, 4 + len(rest))]
        assert len(rest) == (len(new) - 4) // 4 * 4


@pytest.mark.timeout(120)
def test_iter_mix_by_cost_restores_with_new_weights_under_workers():
    parts, _ = _corpus()
    old = IterDataset.mix([p.to_iter_dataset() for p in parts], WEIGHTS, costs=_tokens)
    it = iter(old.mp_prefetch(_options(2)))
    delivered = [next(it) for _ in range(150)]
    state = it.get_state()
    it.close()
    new = IterDataset.mix([p.to_iter_dataset() for p in parts], [0.2, 0.3, 0.5], costs=_tokens)
    fresh = iter(new.mp_prefetch(_options(2)))
    fresh.set_state(state)
    later = list(fresh)
    pairs = [(x["c"], x["i"]) for x in delivered + later]
    assert len(set(pairs)) == len(pairs)  # every component continues where it stopped
    assert len(later) > 50
    assert np.abs(_shares(later) - [0.2, 0.3, 0.5]).max() < 0.1
