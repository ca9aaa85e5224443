"""ReadOptions (threads of `to_iter_dataset`) and DatasetOptions (pipeline-wide knobs)."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from grain_index import checks


@dataclasses.dataclass
class ReadOptions:
    """How `MapDataset.to_iter_dataset` reads and transforms elements.

    Args:
      num_threads: threads that read and transform elements ahead of the
        consumer, in order. 0 reads in the calling thread.
      prefetch_buffer_size: the most elements in flight (read ahead but not
        yet returned); it bounds memory.

    Mutable, as Grain's is (a field set later is checked too); a pipeline reads
    the values when its iterator is created.

    Example::

        ds.to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("num_threads", "prefetch_buffer_size"):
            checks.int_in_range(
                value, f"ReadOptions.{name}", 0, lead=name + " must be non-negative, got {value}."
            )
        object.__setattr__(self, name, value)


def _ratio(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"`{name}` must be a number in [0, 1] or None, got {value!r}.")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"`{name}` must be in [0, 1] or None, got {value}.")
    return float(value)


class ExecutionTrackingMode(enum.Enum):
    """Whether a pipeline records per-stage statistics (`DatasetIterator.stats()`)."""

    DISABLED = "disabled"
    STAGE_TIMING = "stage_timing"


def _mode(value: Any, name: str) -> ExecutionTrackingMode:
    try:
        return ExecutionTrackingMode(value)
    except ValueError:
        allowed = ", ".join(repr(mode.value) for mode in ExecutionTrackingMode)
        raise ValueError(
            f"`{name}` must be a grain.experimental.ExecutionTrackingMode or one of "
            f"{allowed}, got {value!r}."
        ) from None


def _size(value: Any, name: str) -> int:
    return checks.int_in_range(value, name, 0)


_DEFAULTS: dict[str, Any] = {
    "filter_warn_threshold_ratio": 0.9,
    "filter_raise_threshold_ratio": None,
    "execution_tracking_mode": ExecutionTrackingMode.DISABLED,
    "min_shm_size": 0,
}
_CHECKS = {
    "filter_warn_threshold_ratio": _ratio,
    "filter_raise_threshold_ratio": _ratio,
    "execution_tracking_mode": _mode,
    "min_shm_size": _size,
}


class _Default:
    """The marker of an option left at its default (so `merge` can tell)."""

    def __repr__(self) -> str:
        return "<default>"


_DEFAULT: Any = _Default()


class DatasetOptions:
    """Options that apply to a whole pipeline; set them with `WithOptionsIterDataset`.

    Args:
      filter_warn_threshold_ratio: warn once when a filter drops more than this
        share of the elements it sees (default 0.9); None never warns.
      filter_raise_threshold_ratio: raise when a filter drops more than this
        share (default None: never raises).
      execution_tracking_mode: ``ExecutionTrackingMode.STAGE_TIMING`` (or
        ``"stage_timing"``) makes the pipeline's iterators count elements and
        time per stage; read the summary with ``iterator.stats()``. Off by
        default, and then it costs nothing.
      min_shm_size: numpy arrays smaller than this many bytes travel from
        worker processes (`mp_prefetch`) by copy instead of through shared
        memory (default 0: the transport decides by its own threshold).

    A ratio is checked once a filter has seen at least `MIN_FILTER_CHECK`
    elements, so a few unlucky first elements do not trip it. An iteration
    that ends before that having dropped every element it saw (at least one:
    a filter that drops everything, a source whose records are all None)
    counts as a ratio of 1.0, so by default it warns rather than ending
    silently empty. Options record
    which fields were given: `merge` lets those win, even when a given value
    equals the default.
    """

    __slots__ = ("_given", *_DEFAULTS)
    # Declared for type checkers: __init__ sets them through object.__setattr__.
    _given: frozenset[str]
    filter_warn_threshold_ratio: float | None
    filter_raise_threshold_ratio: float | None
    execution_tracking_mode: ExecutionTrackingMode
    min_shm_size: int

    def __init__(
        self,
        *,
        filter_warn_threshold_ratio: float | None = _DEFAULT,
        filter_raise_threshold_ratio: float | None = _DEFAULT,
        execution_tracking_mode: ExecutionTrackingMode | str = _DEFAULT,
        min_shm_size: int = _DEFAULT,
    ):
        values = {
            "filter_warn_threshold_ratio": filter_warn_threshold_ratio,
            "filter_raise_threshold_ratio": filter_raise_threshold_ratio,
            "execution_tracking_mode": execution_tracking_mode,
            "min_shm_size": min_shm_size,
        }
        given = frozenset(name for name, value in values.items() if value is not _DEFAULT)
        for name, value in values.items():
            value = _DEFAULTS[name] if value is _DEFAULT else value
            object.__setattr__(self, name, _CHECKS[name](value, name))
        object.__setattr__(self, "_given", given)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(
            f"DatasetOptions is immutable: cannot set `{name}`; build a new one or use merge()."
        )

    def merge(self, other: DatasetOptions | None) -> DatasetOptions:
        """Returns options where the fields given to `self` win over those of `other`."""
        if other is None:
            return self
        values = {
            name: getattr(self if name in self._given else other, name)
            for name in _DEFAULTS
            if name in self._given | other._given
        }
        return DatasetOptions(**values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DatasetOptions):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _DEFAULTS)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in _DEFAULTS))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _DEFAULTS)
        return f"DatasetOptions({fields})"


MIN_FILTER_CHECK = 100
"""Elements a filter must have seen before its drop ratio is checked."""
