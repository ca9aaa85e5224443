"""grain.sharding: splitting records over hosts."""

from grain_index import NoSharding as NoSharding
from grain_index import ShardOptions as ShardOptions

__all__ = ["NoSharding", "ShardOptions"]
