"""The filter-ratio check of DatasetOptions: warn or raise when filters drop too much."""

from __future__ import annotations

import warnings
from typing import Any

from grain_dataset._options import MIN_FILTER_CHECK, DatasetOptions

_DEFAULT_OPTIONS = DatasetOptions()


class FilterRatioCheck:
    """Counts what a filtering stage saw and dropped; checks the pipeline's thresholds."""

    __slots__ = ("_dropped", "_seen", "_stage", "_warned")

    def __init__(self, stage: str):
        self._stage = stage
        self._seen = 0
        self._dropped = 0
        self._warned = False

    def add(self, seen: int, dropped: int, options: DatasetOptions | None) -> None:
        self._seen += seen
        self._dropped += dropped
        if self._seen < MIN_FILTER_CHECK or not self._dropped:
            return
        options = options or _DEFAULT_OPTIONS
        ratio = self._dropped / self._seen
        limit = options.filter_raise_threshold_ratio
        if limit is not None and ratio > limit:
            raise ValueError(
                f"{self._stage} dropped {self._dropped} of {self._seen} elements "
                f"({ratio:.1%}), above filter_raise_threshold_ratio={limit}. Check the "
                "filter, or raise the threshold with grain.experimental.WithOptionsIterDataset("
                "ds, grain.experimental.DatasetOptions(filter_raise_threshold_ratio=...))."
            )
        limit = options.filter_warn_threshold_ratio
        if limit is not None and ratio > limit and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self._stage} dropped {self._dropped} of {self._seen} elements "
                f"({ratio:.1%}), above filter_warn_threshold_ratio={limit}: consider storing "
                "a filtered copy of the data. Set the threshold with "
                "grain.experimental.DatasetOptions(filter_warn_threshold_ratio=...) applied "
                "with WithOptionsIterDataset.",
                UserWarning,
                stacklevel=4,
            )


def options_of(iterator: Any) -> DatasetOptions | None:
    return iterator._ctx.dataset_options
