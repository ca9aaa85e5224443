"""pick_performance_config: worker count and buffer sizes chosen from a measured sample.

How it decides (all from a short sample of real elements, at most about
`_SAMPLE_S` seconds and `_SAMPLE_ELEMENTS` elements):

1. Element size: the bytes of the numpy arrays (and bytes/str leaves) of the
   largest sampled element.
2. Element cost: the median wall time to produce one element in this process.
3. Workers: a pipeline whose elements cost at least `_WORKER_WORTH_S` each is
   worth spreading over processes (below that, the hand-off costs more than it
   saves): one worker per CPU, at most `max_workers`; otherwise 0.
4. Buffers: half of `ram_budget_mb` may hold read-ahead elements. Each worker
   gets ``budget / (workers * element size)`` elements, at most
   `max_buffer_size` (default 64) and at least 1; the thread read-ahead of
   `to_iter_dataset` (ReadOptions.prefetch_buffer_size) gets the same share,
   at most 500, with 16 threads when elements are cheap and CPU-bound work is
   not the point (threads help waiting, not computing).

Store the returned config with your run (e.g. in the checkpoint directory):
the worker count depends on the machine, and mp_prefetch's output order
depends on it when the pipeline has many-to-one steps.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any

import numpy as np

from grain_dataset import IterDataset, MapDataset, ReadOptions
from grain_mp._options import MultiprocessingOptions

_SAMPLE_S = 0.5
_SAMPLE_ELEMENTS = 32
_WORKER_WORTH_S = 200e-6
_MAX_BUFFER = 64
_MAX_READ_AHEAD = 500


@dataclasses.dataclass(frozen=True)
class PerformanceConfig:
    """What `pick_performance_config` chose: pass each part to its stage."""

    multiprocessing_options: MultiprocessingOptions
    read_options: ReadOptions


def _nbytes(element: Any) -> int:
    if isinstance(element, np.ndarray | np.generic):
        return int(element.nbytes)
    if isinstance(element, bytes | str):
        return len(element)
    if isinstance(element, dict):
        return sum(_nbytes(value) for value in element.values())
    if isinstance(element, list | tuple):
        return sum(_nbytes(value) for value in element)
    return 8


def _sample(ds: Any) -> tuple[list[float], list[int]]:
    """Seconds and bytes of up to `_SAMPLE_ELEMENTS` elements of `ds`."""
    seconds: list[float] = []
    sizes: list[int] = []
    deadline = time.perf_counter() + _SAMPLE_S
    if isinstance(ds, MapDataset):
        length = len(ds)
        if not length:
            raise ValueError(f"pick_performance_config: the dataset {ds!r} is empty.")
        count = min(_SAMPLE_ELEMENTS, length)
        for index in np.linspace(0, length - 1, count).astype(np.int64).tolist():
            start = time.perf_counter()
            element = ds[index]
            seconds.append(time.perf_counter() - start)
            if element is not None:
                sizes.append(_nbytes(element))
            if time.perf_counter() > deadline:
                break
    elif isinstance(ds, IterDataset):
        iterator = iter(ds)
        try:
            for _ in range(_SAMPLE_ELEMENTS):
                start = time.perf_counter()
                try:
                    element = next(iterator)
                except StopIteration:
                    break
                seconds.append(time.perf_counter() - start)
                sizes.append(_nbytes(element))
                if time.perf_counter() > deadline:
                    break
        finally:
            iterator.close()
    else:
        raise TypeError(
            f"pick_performance_config: `ds` must be a MapDataset or IterDataset, "
            f"got {type(ds).__name__}."
        )
    if not seconds or not sizes:
        raise ValueError(
            f"pick_performance_config: the dataset {ds!r} produced no element to measure."
        )
    return seconds, sizes


def pick_performance_config(
    ds: MapDataset[Any] | IterDataset[Any],
    ram_budget_mb: int,
    max_workers: int | None = None,
    max_buffer_size: int | None = None,
) -> PerformanceConfig:
    """Chooses mp_prefetch and to_iter_dataset options for `ds` within `ram_budget_mb`.

    It reads a short sample of elements (see the module docstring for the rule).

    Example::

        config = grain.experimental.pick_performance_config(ds, ram_budget_mb=1024)
        ds = ds.to_iter_dataset(config.read_options).mp_prefetch(
            config.multiprocessing_options
        )
    """
    if isinstance(ram_budget_mb, bool) or not isinstance(ram_budget_mb, int | float):
        raise TypeError(f"`ram_budget_mb` must be a number of megabytes, got {ram_budget_mb!r}.")
    if ram_budget_mb <= 0:
        raise ValueError(f"`ram_budget_mb` must be > 0, got {ram_budget_mb}.")
    for name, value in (("max_workers", max_workers), ("max_buffer_size", max_buffer_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"`{name}` must be an int or None, got {value!r}.")
        if value is not None and value < (0 if name == "max_workers" else 1):
            raise ValueError(f"`{name}` must be >= {0 if name == 'max_workers' else 1}.")
    seconds, sizes = _sample(ds)
    cost = statistics.median(seconds)
    size = max(1, max(sizes))
    cpus = os.cpu_count() or 1
    workers = cpus if cost >= _WORKER_WORTH_S else 0
    if max_workers is not None:
        workers = min(workers, max_workers)
    share = ram_budget_mb * 1e6 / 2 / max(1, workers) / size
    buffer = int(max(1, min(max_buffer_size or _MAX_BUFFER, share)))
    read_ahead = int(max(1, min(_MAX_READ_AHEAD, ram_budget_mb * 1e6 / 2 / size)))
    return PerformanceConfig(
        multiprocessing_options=MultiprocessingOptions(
            num_workers=workers, per_worker_buffer_size=buffer
        ),
        read_options=ReadOptions(num_threads=16, prefetch_buffer_size=read_ahead),
    )
