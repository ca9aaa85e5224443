"""`WithOptionsIterDataset`: attach DatasetOptions to the pipeline before it.

Options reach every iterator of the pipeline through the context they share
(`_base._IteratorContext`). When several WithOptionsIterDatasets set the same
field, the one later in the pipeline (closer to the output) wins.
"""

from __future__ import annotations

from typing import Any

from grain_dataset._common._options import DatasetOptions, ExecutionTrackingMode
from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._iter_stage import IterStage
from grain_dataset._core._stats import track


class WithOptionsIterDataset(IterStage):
    """The parent's elements, with `options` applied to the whole pipeline up to here.

    Example::

        ds = grain.experimental.WithOptionsIterDataset(
            ds, grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5)
        )
    """

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None

    # Elements pass unchanged; under mp_prefetch's position-wise workers the stage
    # also runs in the parent, where its options reach the pipeline (`_positional`).
    _position_kind = "same"

    def __init__(self, parent: IterDataset[Any], options: DatasetOptions):
        # A MapDataset parent is read with to_iter_dataset(), as Grain accepts it.
        parent = as_iter_dataset(parent, "parent", "WithOptionsIterDataset")
        if not isinstance(options, DatasetOptions):
            raise TypeError(
                f"`options` must be a grain.experimental.DatasetOptions, got {options!r}."
            )
        super().__init__(parent)
        self._options = options

    def __iter__(self) -> DatasetIterator[Any]:
        iterator = iter(self._parents[0])
        ctx = iterator._ctx
        ctx.dataset_options = self._options.merge(ctx.dataset_options)
        if ctx.dataset_options.execution_tracking_mode is ExecutionTrackingMode.STAGE_TIMING:
            track(iterator)
        return iterator

    def _describe(self) -> str:
        return repr(self._options)
