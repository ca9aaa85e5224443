"""Samplers: the DataLoader guide's behaviour, random access, sharding, epochs."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_index import IndexSampler, NoSharding, RecordMetadata, SequentialSampler, ShardOptions


def keys(sampler):
    return [m.record_key for m in sampler]


def test_guide_example_two_shuffled_epochs():
    sampler = IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )
    metadata = list(sampler)
    assert [m.index for m in metadata] == list(range(10))
    assert sorted(m.record_key for m in metadata[:5]) == list(range(5))
    assert sorted(m.record_key for m in metadata[5:]) == list(range(5))
    assert all(isinstance(m.rng, np.random.Generator) for m in metadata)
    assert list(sampler) == [], "the sampler is an iterator: iterating consumes it"


def test_epochs_are_different_permutations_and_reproducible():
    a = keys(IndexSampler(100, NoSharding(), shuffle=True, num_epochs=3, seed=9))
    b = keys(IndexSampler(100, NoSharding(), shuffle=True, num_epochs=3, seed=9))
    assert a == b
    epochs = [a[i : i + 100] for i in range(0, 300, 100)]
    assert all(sorted(e) == list(range(100)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3
    assert epochs[0] != list(range(100))
    assert keys(IndexSampler(100, shuffle=True, num_epochs=1, seed=10)) != epochs[0]


def test_random_access_matches_iteration_and_vectorized_forms():
    sampler = IndexSampler(37, ShardOptions(1, 3), shuffle=True, num_epochs=4, seed=3)
    metadata = list(IndexSampler(37, ShardOptions(1, 3), shuffle=True, num_epochs=4, seed=3))
    assert len(sampler) == len(metadata) == 4 * 12
    steps = np.arange(len(sampler))
    assert [sampler[int(k)].record_key for k in steps] == [m.record_key for m in metadata]
    assert sampler.record_keys(steps).tolist() == [m.record_key for m in metadata]
    assert sampler.indices(steps).tolist() == [m.index for m in metadata]
    permuted = np.random.default_rng(0).permutation(steps)
    assert sampler.record_keys(permuted).tolist() == [sampler[int(k)].record_key for k in permuted]


@given(
    n=st.integers(1, 300),
    count=st.integers(1, 8),
    drop=st.booleans(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_each_epoch_shards_partition_the_records(n, count, drop, shuffle, seed):
    samplers = [
        IndexSampler(n, ShardOptions(i, count, drop), shuffle=shuffle, num_epochs=2, seed=seed)
        for i in range(count)
    ]
    sizes = [len(s) // 2 for s in samplers]
    for epoch in range(2):
        taken = np.concatenate(
            [
                s.record_keys(np.arange(epoch * size, (epoch + 1) * size))
                for s, size in zip(samplers, sizes, strict=True)
            ]
        )
        assert len(np.unique(taken)) == len(taken), "a record was read by two shards"
        assert len(taken) == (n - n % count if drop else n)
    if drop:
        assert len(set(sizes)) == 1
    all_indices = np.concatenate([s.indices(np.arange(len(s))) for s in samplers])
    assert len(np.unique(all_indices)) == len(all_indices), "indices must be unique over shards"


def test_infinite_epochs():
    sampler = IndexSampler(10, NoSharding(), shuffle=True, num_epochs=None, seed=1)
    assert sampler.num_steps is None
    assert len(sampler) == sys.maxsize  # as in Grain
    far = 10**12 + 3
    assert 0 <= sampler[far].record_key < 10
    first = [next(sampler).record_key for _ in range(35)]
    assert all(sorted(first[i : i + 10]) == list(range(10)) for i in (0, 10, 20))


def test_per_record_rng_is_deterministic_and_distinct():
    a = IndexSampler(10, NoSharding(), seed=5)
    b = IndexSampler(10, NoSharding(), seed=5)
    draws = [a[k].rng.integers(2**62) for k in range(10)]
    assert draws == [b[k].rng.integers(2**62) for k in range(10)]
    assert len(set(draws)) == 10
    assert IndexSampler(10, NoSharding())[0].rng is None


def test_sequential_sampler_reads_once_in_order():
    sampler = SequentialSampler(4)
    assert keys(sampler) == [0, 1, 2, 3]
    assert keys(SequentialSampler(10, ShardOptions(1, 2))) == [5, 6, 7, 8, 9]
    assert repr(SequentialSampler(4)) == (
        "SequentialSampler(num_records=4, shard_options=NoSharding(shard_index=0, "
        "shard_count=1, drop_remainder=False), seed=None)"
    )


def test_repr_is_deterministic_for_checkpoint_checks():
    text = repr(IndexSampler(5, NoSharding(), shuffle=True, num_epochs=2, seed=0))
    assert text == repr(IndexSampler(5, NoSharding(), shuffle=True, num_epochs=2, seed=0))
    assert "0x" not in text


def test_record_metadata():
    metadata = RecordMetadata(index=3, record_key=8)
    assert repr(metadata) == "RecordMetadata(index=3, record_key=8, rng=None)"
    seeded = RecordMetadata(index=3, record_key=8, rng=np.random.Generator(np.random.Philox(1)))
    assert repr(seeded) == "RecordMetadata(index=3, record_key=8, rng=Generator(Philox))"
    assert metadata.remove_record_key() == RecordMetadata(index=3, record_key=None)


def test_defaults_are_no_sharding_and_endless_epochs():
    sampler = IndexSampler(5)
    assert repr(sampler) == repr(IndexSampler(5, NoSharding(), False, None, None))
    assert sampler.num_steps is None
    assert [sampler[k].record_key for k in range(12)] == [0, 1, 2, 3, 4] * 2 + [0, 1]
    assert SequentialSampler(3).num_steps == 3


@pytest.mark.parametrize("seed", [0, 1, 2**31, 2**32 - 1, np.uint32(7)])
def test_seeds_span_32_bits(seed):
    sampler = IndexSampler(5, shuffle=True, num_epochs=1, seed=seed)
    assert sorted(keys(sampler)) == list(range(5))
    assert SequentialSampler(5, seed=seed)[0].rng is not None


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: IndexSampler(5, NoSharding(), shuffle=True), ValueError, "seed"),
        (lambda: IndexSampler(0), ValueError, "`num_records` must be >= 1"),
        (lambda: IndexSampler(-1, NoSharding()), ValueError, "`num_records`"),
        (lambda: IndexSampler(1.5), TypeError, "`num_records`"),
        (lambda: IndexSampler("3"), TypeError, "`num_records`"),
        (lambda: IndexSampler(5, NoSharding(), num_epochs=0), ValueError, "`num_epochs`"),
        (lambda: IndexSampler(5, num_epochs=-1), ValueError, "`num_epochs`"),
        (lambda: IndexSampler(5, num_epochs=1.5), TypeError, "`num_epochs`"),
        (lambda: IndexSampler(5, None), TypeError, "`shard_options`"),
        (lambda: IndexSampler(5, shard_options=3), TypeError, "`shard_options`"),
        (lambda: IndexSampler(5, NoSharding(), seed=-2), ValueError, r"`seed`.*2\*\*32"),
        (lambda: IndexSampler(5, seed=2**32), ValueError, r"`seed`.*2\*\*32"),
        (lambda: IndexSampler(5, seed=2**64 - 1), ValueError, "`seed`"),
        (lambda: IndexSampler(5, seed=1.5), TypeError, "`seed`"),
        (lambda: IndexSampler(5, seed="1"), TypeError, "`seed`"),
        (lambda: IndexSampler(5, NoSharding(), shuffle=1), TypeError, "`shuffle`"),
        (lambda: IndexSampler(5, num_epochs=1)[5], IndexError, "out of range"),
        (lambda: IndexSampler(5)[-1], IndexError, "out of range"),
        (lambda: IndexSampler(5, num_epochs=1).record_keys([7]), IndexError, "out of range"),
        (lambda: IndexSampler(5).record_keys([-1]), IndexError, "`steps`"),
        (lambda: SequentialSampler(0), ValueError, "`num_records`"),
        (lambda: SequentialSampler(-1), ValueError, "`num_records`"),
        (lambda: SequentialSampler(3, seed=2**32), ValueError, "`seed`"),
        (lambda: SequentialSampler(3)[3], IndexError, "out of range"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
