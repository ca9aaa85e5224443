"""RangeDataSource: the integers of a range, as a random-access source."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from grain_sources._checks import as_index, record_index, record_indices


class RangeDataSource:
    """The integers ``range(start, stop, step)`` as a random-access source.

    Useful for tests and as the index source of synthetic pipelines. Reading
    costs nothing, so a pipeline over it measures the pipeline alone.

    Example::

        source = grain.sources.RangeDataSource(0, 10, 2)
        list(grain.MapDataset.source(source))  # [0, 2, 4, 6, 8]
    """

    # __getitems__ returns [self[i] for i in indices]: see RandomAccessDataSource.
    batched_reads: ClassVar[bool] = True

    def __init__(self, start: int, stop: int, step: int = 1):
        start, stop, step = as_index(start, "start"), as_index(stop, "stop"), as_index(step, "step")
        if step == 0:
            raise ValueError("`step` of RangeDataSource must not be 0.")
        self._range = builtins.range(start, stop, step)
        try:
            len(self._range)
        except OverflowError:
            raise ValueError(
                f"RangeDataSource({start}, {stop}, {step}) has more than sys.maxsize "
                "elements: a source's length must fit in a Python index."
            ) from None
        # Outside int64 the vectorized path would overflow; exact Python ints are used instead.
        self._fits = max(abs(start), abs(stop)) + abs(step) < 1 << 62

    @property
    def start(self) -> int:
        return self._range.start

    @property
    def stop(self) -> int:
        return self._range.stop

    @property
    def step(self) -> int:
        return self._range.step

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index: int) -> int:
        return self._range[record_index(index, len(self._range), self)]

    def __getitems__(self, indices: Sequence[int]) -> list[int]:
        """The records at many indices at once (vectorized)."""
        offsets = record_indices(indices, len(self._range), self)
        r = self._range
        if self._fits:
            return (offsets * r.step + r.start).tolist()
        return [r[offset] for offset in offsets.tolist()]

    def __iter__(self) -> Iterator[int]:
        return iter(self._range)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, RangeDataSource):
            return NotImplemented
        return self._range == other._range

    def __hash__(self) -> int:
        return hash(self._range)

    def __repr__(self) -> str:
        r = self._range
        return f"RangeDataSource(start={r.start}, stop={r.stop}, step={r.step})"
