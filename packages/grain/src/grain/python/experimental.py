"""grain.python.experimental: the same names as `grain.experimental` (Grain has both)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from grain import experimental as _experimental

if _TYPE_CHECKING:
    from grain.experimental import *  # noqa: F403 - the same namespace under Grain's second name

__all__ = list(_experimental.__all__)

# Every name but the JAX ones, which need `grainline[jax]` and are looked up on first use.
globals().update(
    {name: getattr(_experimental, name) for name in __all__ if name not in _experimental._JAX_NAMES}
)


def __getattr__(name: str) -> _Any:
    return getattr(_experimental, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
