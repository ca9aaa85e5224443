"""The filter-ratio check of DatasetOptions: warn or raise when filters drop too much.

Two rules, both judged against the pipeline's thresholds:

- the share dropped so far, once at least `MIN_FILTER_CHECK` elements were
  seen (so that a few unlucky first elements of a long stream do not trip it;
  a leading run of drops that long is judged at once, at a ratio of 1.0);
- at the end of an iteration that saw fewer, if it dropped every element it
  saw (at least one): an epoch that yields nothing is a bug whatever its size,
  so it counts as a ratio of 1.0. An iterator restored with `set_state` saw only
  the rest of its epoch, whose elements may all be dropped legitimately: that
  rule is off for it.
"""

from __future__ import annotations

import warnings
from typing import Any

from grain_dataset._common._options import MIN_FILTER_CHECK, DatasetOptions

_DEFAULT_OPTIONS = DatasetOptions()


class FilterRatioCheck:
    """Counts what a filtering stage saw and dropped; checks the pipeline's thresholds."""

    __slots__ = ("_dropped", "_partial", "_seen", "_stage", "_warned")

    def __init__(self, stage: str):
        self._stage = stage
        self._seen = 0
        self._dropped = 0
        self._warned = False
        self._partial = False

    def add(self, seen: int, dropped: int, options: DatasetOptions | None) -> None:
        """Counts `seen` more elements, `dropped` of them dropped, and judges the total."""
        self._seen += seen
        self._dropped += dropped
        if self._seen >= MIN_FILTER_CHECK and self._dropped:
            self._judge(options)

    def end(self, options: DatasetOptions | None) -> None:
        """Judges an iteration that reached its end (see the module doc)."""
        seen = self._seen
        if 0 < seen < MIN_FILTER_CHECK and self._dropped == seen and not self._partial:
            self._judge(options)

    def restored(self) -> None:
        """The iterator was moved by `set_state`: what follows is not a whole epoch."""
        self._partial = True

    def _judge(self, options: DatasetOptions | None) -> None:
        options = options or _DEFAULT_OPTIONS
        ratio = self._dropped / self._seen
        limit = options.filter_raise_threshold_ratio
        if limit is not None and ratio > limit:
            raise ValueError(
                f"Transformation {self._stage} skipped {ratio * 100:.2f} % of the last seen "
                f"{self._seen} elements. Please check the filtering logic. If this is intended, "
                "consider pre-filtering the input dataset before training. To disable this "
                "check, set `grain.experimental.DatasetOptions.filter_raise_threshold_ratio` "
                "used in `WithOptionsIterDataset` to `None`. "
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
                stacklevel=5,
            )


def options_of(iterator: Any) -> DatasetOptions | None:
    return iterator._ctx.dataset_options
