"""grain.python.experimental: the same names as `grain.experimental` (Grain has both)."""

from typing import Any as _Any

from grain import experimental as _experimental
from grain.experimental import *  # noqa: F403 - the same namespace under Grain's second name

__all__ = list(_experimental.__all__)


def __getattr__(name: str) -> _Any:
    return getattr(_experimental, name)
