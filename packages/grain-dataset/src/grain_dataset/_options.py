"""ReadOptions (threads of `to_iter_dataset`) and DatasetOptions (pipeline-wide knobs)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from grain_index import _validate


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How `MapDataset.to_iter_dataset` reads and transforms elements.

    Args:
      num_threads: threads that read and transform elements ahead of the
        consumer, in order. 0 reads in the calling thread.
      prefetch_buffer_size: the most elements in flight (read ahead but not
        yet returned); it bounds memory.

    Example::

        ds.to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self) -> None:
        _validate.int_in_range(self.num_threads, "ReadOptions.num_threads", 0)
        _validate.int_in_range(self.prefetch_buffer_size, "ReadOptions.prefetch_buffer_size", 0)


def _ratio(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"`{name}` must be a number in [0, 1] or None, got {value!r}.")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"`{name}` must be in [0, 1] or None, got {value}.")
    return float(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetOptions:
    """Options that apply to a whole pipeline; set them with `WithOptionsIterDataset`.

    Args:
      filter_warn_threshold_ratio: warn once when a filter drops more than this
        share of the elements it sees; None never warns.
      filter_raise_threshold_ratio: raise when a filter drops more than this
        share; None never raises.

    A ratio is checked once a filter has seen at least `MIN_FILTER_CHECK`
    elements, so a few unlucky first elements do not trip it.
    """

    filter_warn_threshold_ratio: float | None = 0.9
    filter_raise_threshold_ratio: float | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _ratio(getattr(self, field.name), field.name))

    def merge(self, other: DatasetOptions | None) -> DatasetOptions:
        """Returns options where the fields `self` sets (not left at default) win over `other`'s."""
        if other is None:
            return self
        values = {}
        for field in dataclasses.fields(self):
            mine = getattr(self, field.name)
            values[field.name] = getattr(other, field.name) if mine == field.default else mine
        return DatasetOptions(**values)


MIN_FILTER_CHECK = 100
"""Elements a filter must have seen before its drop ratio is checked."""
