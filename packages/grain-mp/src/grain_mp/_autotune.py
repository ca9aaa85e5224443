"""pick_performance_config: worker count and buffer sizes chosen from a measured sample.

How it decides (from `samples_to_check` real elements, at most about `_SAMPLE_S`
seconds of reading; `choose` is the rule, apart from the measuring):

1. Element size: the bytes of the numpy arrays (and bytes/str leaves) of the
   largest sampled element.
2. Element cost: the median wall time to produce one element in this process.
3. Workers: a pipeline whose elements cost at least `_WORKER_WORTH_S` each is
   worth spreading over processes (below that, the hand-off costs more than it
   saves): one worker per CPU; otherwise 0. Never more than `max_workers`, nor
   more than the workers of which each can hold one element in half the budget.
4. Buffers: half of `ram_budget_mb` may hold read-ahead elements. Each worker
   gets ``budget / (workers * element size)`` elements, at most
   `max_buffer_size` (64 when None) and at least 1; the thread read-ahead of
   `to_iter_dataset` (ReadOptions.prefetch_buffer_size) gets the same share,
   at most `max_buffer_size` (500 when None), with 16 threads.

The limits given are never exceeded: ``num_workers <= max_workers`` and both
buffer sizes ``<= max_buffer_size``.

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
_WORKER_WORTH_S = 200e-6
_MAX_BUFFER = 64
_MAX_READ_AHEAD = 500


@dataclasses.dataclass
class PerformanceConfig:
    """Options for a pipeline's stages, as `pick_performance_config` chose them.

    Attributes:
      multiprocessing_options: for `IterDataset.mp_prefetch`, or None.
      read_options: for `MapDataset.to_iter_dataset`, or None.

    Example::

        config = grain.experimental.pick_performance_config(
            ds, ram_budget_mb=1024, max_workers=None, max_buffer_size=None
        )
        ds = ds.to_iter_dataset(config.read_options).mp_prefetch(
            config.multiprocessing_options
        )
    """

    multiprocessing_options: MultiprocessingOptions | None = None
    read_options: ReadOptions | None = None


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


def _sample(ds: Any, samples: int) -> tuple[list[float], list[int]]:
    """Seconds and bytes of up to `samples` elements of `ds`."""
    seconds: list[float] = []
    sizes: list[int] = []
    deadline = time.perf_counter() + _SAMPLE_S
    if isinstance(ds, MapDataset):
        length = len(ds)
        if not length:
            raise ValueError(f"pick_performance_config: the dataset {ds!r} is empty.")
        count = min(samples, length)
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
            for _ in range(samples):
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


def _limit(value: Any, name: str, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an integer >= {low} or None, got {value!r}.")
    if value < low:
        raise ValueError(f"`{name}` must be >= {low} or None, got {value}.")
    return int(value)


def _default_budget_mb() -> float:
    """Half of the machine's physical memory, in MB (1024 if it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2e6
    except (ValueError, OSError, AttributeError):
        return 1024.0


def choose(
    cost_s: float,
    size: int,
    *,
    ram_budget_mb: float,
    max_workers: int | None,
    max_buffer_size: int | None,
    cpus: int,
) -> tuple[int, int, int]:
    """``(workers, per-worker buffer, read-ahead)`` for elements of `cost_s` and `size` bytes.

    The rule of the module docstring, without the measuring. Never above
    `max_workers` or `max_buffer_size`; buffers at least 1.
    """
    size = max(1, size)
    half_budget = ram_budget_mb * 1e6 / 2
    workers = cpus if cost_s >= _WORKER_WORTH_S else 0
    if max_workers is not None:
        workers = min(workers, max_workers)
    if workers:
        workers = min(workers, max(1, int(half_budget // size)))
    buffer_cap = _MAX_BUFFER if max_buffer_size is None else max_buffer_size
    buffer = int(max(1, min(buffer_cap, half_budget / max(1, workers) / size)))
    read_cap = _MAX_READ_AHEAD if max_buffer_size is None else max_buffer_size
    read_ahead = int(max(1, min(read_cap, half_budget / size)))
    return workers, buffer, read_ahead


def pick_performance_config(
    ds: MapDataset[Any] | IterDataset[Any],
    *,
    ram_budget_mb: int | None,
    max_workers: int | None,
    max_buffer_size: int | None,
    samples_to_check: int = 5,
) -> PerformanceConfig:
    """Chooses mp_prefetch and to_iter_dataset options for `ds` within `ram_budget_mb`.

    It reads `samples_to_check` elements and measures their size and cost (see
    the module docstring for the rule).

    Args:
      ds: the pipeline to measure, a MapDataset or an IterDataset.
      ram_budget_mb: megabytes that read-ahead elements may hold; None for half
        of the machine's memory.
      max_workers: the most worker processes to propose, >= 0; None for one per CPU.
      max_buffer_size: the most elements any buffer (per worker, and the
        thread read-ahead) may hold, >= 1; None for the defaults (64 and 500).
      samples_to_check: how many elements to read for the measurement, >= 1.

    Example::

        config = grain.experimental.pick_performance_config(
            ds, ram_budget_mb=1024, max_workers=8, max_buffer_size=100
        )
        ds = ds.to_iter_dataset(config.read_options).mp_prefetch(
            config.multiprocessing_options
        )
    """
    if ram_budget_mb is None:
        budget = _default_budget_mb()
    elif isinstance(ram_budget_mb, bool) or not isinstance(ram_budget_mb, int | float):
        raise TypeError(
            f"`ram_budget_mb` must be a number of megabytes or None, got {ram_budget_mb!r}."
        )
    elif ram_budget_mb <= 0:
        raise ValueError(f"`ram_budget_mb` must be > 0, got {ram_budget_mb}.")
    else:
        budget = float(ram_budget_mb)
    workers_cap = _limit(max_workers, "max_workers", 0)
    buffer_cap = _limit(max_buffer_size, "max_buffer_size", 1)
    samples = _limit(samples_to_check, "samples_to_check", 1)
    assert samples is not None
    seconds, sizes = _sample(ds, samples)
    workers, buffer, read_ahead = choose(
        statistics.median(seconds),
        max(sizes),
        ram_budget_mb=budget,
        max_workers=workers_cap,
        max_buffer_size=buffer_cap,
        cpus=os.cpu_count() or 1,
    )
    return PerformanceConfig(
        multiprocessing_options=MultiprocessingOptions(
            num_workers=workers, per_worker_buffer_size=buffer
        ),
        read_options=ReadOptions(num_threads=16, prefetch_buffer_size=read_ahead),
    )
