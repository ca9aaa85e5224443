"""Sharding: which part of [0, n) each of `shard_count` shards owns.

Shards own contiguous ranges of *positions*. With `drop_remainder=False` the
ranges partition [0, n) and the first ``n % shard_count`` shards own one
position more than the others (as Grain's ShardOptions documents it: 10
records over 3 shards are [0, 4), [4, 7), [7, 10)); with `True` every shard
has ``n // shard_count`` positions and the last ``n % shard_count`` positions
belong to no shard.
"""

from __future__ import annotations

import dataclasses

from grain_index import _validate


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """Which shard this process reads, out of how many.

    Attributes:
      shard_index: this shard, in [0, shard_count).
      shard_count: the number of shards, >= 1 (e.g. the number of hosts).
      drop_remainder: if True, all shards get the same number of records and
        the remainder is dropped; if False, the remainder goes one record each
        to the first shards.

    Example::

        ShardOptions(shard_index=jax.process_index(), shard_count=jax.process_count())
    """

    shard_index: int
    shard_count: int
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        count = _validate.int_in_range(
            self.shard_count,
            "shard_count",
            1,
            lead="Number of shards must be a positive integer but got {value}.",
        )
        index = _validate.as_int(self.shard_index, "shard_index")
        if not 0 <= index < count:
            raise ValueError(
                f"Shard shard_index must be in [0, shard_count - 1], shard_count was {count} "
                f"and shard_index was {index}. "
                f"`shard_index` must be in [0, shard_count) = [0, {count}), got {index}."
            )
        if not isinstance(self.drop_remainder, bool):
            raise TypeError(
                f"`drop_remainder` must be a bool, got {type(self.drop_remainder).__name__}."
            )
        object.__setattr__(self, "shard_count", count)
        object.__setattr__(self, "shard_index", index)


@dataclasses.dataclass(frozen=True, init=False)
class NoSharding(ShardOptions):
    """Shard options for a single shard that owns everything."""

    def __init__(self) -> None:
        super().__init__(shard_index=0, shard_count=1, drop_remainder=False)


def shard_bounds(num_records: int, options: ShardOptions) -> tuple[int, int]:
    """Returns the [start, end) positions that shard `options` owns out of `num_records`."""
    n = _validate.int_in_range(num_records, "num_records", 0)
    if not isinstance(options, ShardOptions):
        raise TypeError(f"`shard_options` must be a ShardOptions, got {type(options).__name__}.")
    i, count = options.shard_index, options.shard_count
    size, remainder = divmod(n, count)
    if options.drop_remainder:
        return i * size, (i + 1) * size
    start = i * size + min(i, remainder)
    return start, start + size + (i < remainder)
