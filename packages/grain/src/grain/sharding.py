"""grain.sharding: splitting records over hosts."""

from grain_index import NoSharding as NoSharding
from grain_index import ShardOptions as ShardOptions
from grain_jax import ShardByJaxProcess as ShardByJaxProcess

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions"]
