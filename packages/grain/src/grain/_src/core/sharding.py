"""Grain's private sharding module, which axlearn (`even_split`) and others import.

`even_split(num_examples, options)` is `grain_index.shard_bounds`: the
[start, end) range of records that shard `options` owns, with Grain's
parameter names. The classes are those of `grain.sharding`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from grain_index import NoSharding as NoSharding
from grain_index import ShardOptions as ShardOptions
from grain_index import shard_bounds as _shard_bounds

if _TYPE_CHECKING:
    from grain_jax import ShardByJaxProcess as ShardByJaxProcess

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions", "even_split"]


def even_split(num_examples: int, options: ShardOptions) -> tuple[int, int]:
    """The [start, end) records shard `options` owns of `num_examples` (`grain_index.shard_bounds`).

    Example::

        even_split(10, ShardOptions(shard_index=1, shard_count=4))  # (3, 6)
    """
    return _shard_bounds(num_examples, options)


def __getattr__(name: str) -> _Any:
    # ShardByJaxProcess needs grain[jax]: resolved (or refused, naming the extra) on use.
    if name != "ShardByJaxProcess":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from grain import sharding

    return sharding.ShardByJaxProcess
