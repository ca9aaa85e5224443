"""MultiprocessingOptions: how many worker processes, and how far each reads ahead."""

from __future__ import annotations

import dataclasses
from typing import Any

from grain_index import checks
from grain_mp._ray_options import RayWorkers


@dataclasses.dataclass
class MultiprocessingOptions:
    """Options of `IterDataset.mp_prefetch` (and of the DataLoader's workers).

    Args:
      num_workers: worker processes; 0 runs everything in the calling process.
      per_worker_buffer_size: elements (after all transformations: batches, if
        the pipeline batches) each worker may have ready ahead of the consumer.
      enable_profiling: accepted for compatibility; per-stage statistics come
        from ``DatasetOptions(execution_tracking_mode="stage_timing")``.
      executor: where the workers run: None for this machine (processes, or
        threads where ``grain.config``'s py_worker_executor says so), or a
        `RayWorkers` to run them on actors of a Ray cluster (not in Grain).

    Mutable, as Grain's is (a field set later is checked too); a pipeline reads
    the values when its iterator starts its workers.

    Example::

        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=10))
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False
    executor: RayWorkers | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "num_workers":
            checks.int_in_range(value, "MultiprocessingOptions.num_workers", 0)
        elif name == "per_worker_buffer_size":
            checks.int_in_range(
                value,
                "MultiprocessingOptions.per_worker_buffer_size",
                1,
                lead="`buffer_size` must be greater than 0, got {value}.",
            )
        elif name == "enable_profiling" and not isinstance(value, bool):
            raise TypeError(
                f"`MultiprocessingOptions.enable_profiling` must be a bool, got {value!r}."
            )
        elif name == "executor" and value is not None and not isinstance(value, RayWorkers):
            raise TypeError(
                "`MultiprocessingOptions.executor` must be None (workers on this machine) or "
                f"a grain.experimental.RayWorkers (workers on a Ray cluster), got {value!r}."
            )
        object.__setattr__(self, name, value)
