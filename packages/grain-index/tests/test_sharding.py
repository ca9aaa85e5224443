"""Sharding math: partitions and equal splits."""

import dataclasses
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grain_index import NoSharding, ShardOptions, shard_bounds


@given(n=st.integers(0, 10**6), count=st.integers(1, 300))
def test_without_drop_remainder_shards_partition_with_sizes_within_one(n, count):
    bounds = [shard_bounds(n, ShardOptions(i, count)) for i in range(count)]
    assert bounds[0][0] == 0
    assert bounds[-1][1] == n
    for (_, end), (start, _) in itertools.pairwise(bounds):
        assert end == start
    sizes = [end - start for start, end in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == n


@given(n=st.integers(0, 10**6), count=st.integers(1, 300))
def test_with_drop_remainder_shards_are_equal_and_disjoint(n, count):
    bounds = [shard_bounds(n, ShardOptions(i, count, drop_remainder=True)) for i in range(count)]
    assert {end - start for start, end in bounds} == {n // count}
    assert all(0 <= start <= end <= n for start, end in bounds)
    covered = sum(end - start for start, end in bounds)
    assert covered == n - n % count
    for (_, end), (start, _) in itertools.pairwise(bounds):
        assert end <= start


def test_no_sharding_is_one_shard_with_everything():
    assert dataclasses.astuple(NoSharding()) == (0, 1, False)
    assert isinstance(NoSharding(), ShardOptions)
    assert shard_bounds(17, NoSharding()) == (0, 17)
    assert repr(NoSharding()) == "NoSharding(shard_index=0, shard_count=1, drop_remainder=False)"


def test_options_are_immutable():
    options = ShardOptions(1, 4)
    with pytest.raises(AttributeError):
        options.shard_index = 2


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: ShardOptions(2, 2), ValueError, "shard_index"),
        (lambda: ShardOptions(-1, 2), ValueError, "shard_index"),
        (lambda: ShardOptions(0, 0), ValueError, "shard_count"),
        (lambda: ShardOptions(0, 1.0), TypeError, "shard_count"),
        (lambda: ShardOptions(0, 2, drop_remainder="yes"), TypeError, "drop_remainder"),
        (lambda: shard_bounds(-1, NoSharding()), ValueError, "num_records"),
        (lambda: shard_bounds(5, (0, 1)), TypeError, "shard_options"),
    ],
)
def test_bad_input(call, error, name):
    with pytest.raises(error, match=f"`{name}`"):
        call()
