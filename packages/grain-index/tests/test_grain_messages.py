"""Errors open with Grain's wording, which clients match with `assertRaisesRegex`.

Each case is an error Grain 0.2.18 raises with the same exception type; the
pattern is Grain's message (with this call's values), escaped, so a test fails
if ours stops containing it.
"""

from __future__ import annotations

import re

import pytest

from grain_index import IndexSampler, SequentialSampler, ShardOptions, index_shuffle

CASES = [
    (
        lambda: IndexSampler(num_records=0),
        ValueError,
        "Invalid number of records in Sampler. Got 0 records, but number of records must be "
        "greater than 0.",
    ),
    (
        lambda: SequentialSampler(-1),
        ValueError,
        "Invalid number of records in Sampler. Got -1 records, but number of records must be "
        "greater than 0.",
    ),
    (
        lambda: IndexSampler(3, num_epochs=0),
        ValueError,
        "Invalid number of epochs in Index Sampler.Got 0 epochs, but number of epochs must be "
        "greater than 0.",
    ),
    (lambda: IndexSampler(3, shuffle=True), ValueError, "Shuffling requires specifying a seed."),
    (
        lambda: IndexSampler(3, shuffle=True, seed=-1),
        ValueError,
        "Seed should be positive 32-bit integer.",
    ),
    (lambda: IndexSampler(3, seed=2**32), ValueError, "Seed should be positive 32-bit integer."),
    (
        lambda: IndexSampler(3, shuffle=True, seed="1"),
        TypeError,
        "Expected seed of int type. Got seed with type <class 'str'>",
    ),
    (
        lambda: IndexSampler(3, num_epochs=1)[3],
        IndexError,
        "RecordMetadata object index is out of bounds; Got index 3, allowed indices should be "
        "in [0, 3]",
    ),
    (
        lambda: ShardOptions(shard_index=2, shard_count=2),
        ValueError,
        "Shard shard_index must be in [0, shard_count - 1], shard_count was 2 and shard_index "
        "was 2.",
    ),
    (
        lambda: ShardOptions(shard_index=-1, shard_count=3),
        ValueError,
        "Shard shard_index must be in [0, shard_count - 1], shard_count was 3 and shard_index "
        "was -1.",
    ),
    (
        lambda: ShardOptions(shard_index=0, shard_count=0),
        ValueError,
        "Number of shards must be a positive integer but got 0.",
    ),
    (
        lambda: index_shuffle(10, max_index=5, seed=1, rounds=4),
        ValueError,
        "index must be in [0, max_index], but got index = 10 and max_index = 5",
    ),
]


@pytest.mark.parametrize(("call", "error", "grain"), CASES)
def test_message_opens_with_grains_wording(call, error, grain):
    with pytest.raises(error, match="^" + re.escape(grain)) as info:
        call()
    # Ours adds its explanation, naming the argument, after Grain's wording.
    assert len(str(info.value)) > len(grain)
