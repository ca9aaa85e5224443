"""MultiprocessingOptions: how many worker processes, and how far each reads ahead."""

from __future__ import annotations

import dataclasses

from grain_index import _validate


@dataclasses.dataclass(frozen=True)
class MultiprocessingOptions:
    """Options of `IterDataset.mp_prefetch` (and of the DataLoader's workers).

    Args:
      num_workers: worker processes; 0 runs everything in the calling process.
      per_worker_buffer_size: elements (after all transformations: batches, if
        the pipeline batches) each worker may have ready ahead of the consumer.
      enable_profiling: accepted for compatibility; per-stage statistics come
        from ``DatasetOptions(execution_tracking_mode="stage_timing")``.

    Example::

        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=10))
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False

    def __post_init__(self) -> None:
        _validate.int_in_range(self.num_workers, "MultiprocessingOptions.num_workers", 0)
        _validate.int_in_range(
            self.per_worker_buffer_size, "MultiprocessingOptions.per_worker_buffer_size", 1
        )
        if not isinstance(self.enable_profiling, bool):
            raise TypeError(
                "`MultiprocessingOptions.enable_profiling` must be a bool, "
                f"got {self.enable_profiling!r}."
            )
