"""grain.sharding: splitting records over hosts.

`ShardByJaxProcess` comes with `pip install "grainline[jax]"`; without it the name
raises an ImportError that says so.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from grain._jax_extra import jax_name as _jax_name
from grain_index import NoSharding as NoSharding
from grain_index import ShardOptions as ShardOptions

if _TYPE_CHECKING:
    from grain_jax import ShardByJaxProcess as ShardByJaxProcess

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions"]


def __getattr__(name: str) -> _Any:
    if name != "ShardByJaxProcess":
        raise AttributeError(f"module 'grain.sharding' has no attribute {name!r}")
    value = _jax_name(name, __name__)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
