"""Many threads, many pipelines at once: the library's shared state under real parallelism.

test_concurrency.py checks one iterator called from several threads. Here each of
`THREADS` threads builds, iterates, checkpoints (``get_state``/``set_state`` and
``save``/``load``) and closes pipelines of its own, all at the same time, while
some pipelines share one dataset object (one source, one shuffle: its per-epoch
caches), so the module-level and per-dataset caches, the registries, the
statistics, the random generators and the read threads are all used from many
threads together. On free-threaded CPython (3.13t, ``PYTHON_GIL=0``) the
threads really run in parallel; there the test also checks that nothing turned
the GIL back on (an extension without free-threading support does so on import).

Properties: every thread gets exactly what a single-threaded run of the same
pipeline gives; a state taken mid-stream restores to exactly the rest; no
exception; every thread a pipeline started has ended soon after close; all
within the timeout. ``tools/freethreaded/test.sh integration_tests/
test_thread_stress.py`` runs it on 3.13t; ``--count 20`` (pytest-repeat) or a
loop shakes out races.
"""

from __future__ import annotations

import asyncio
import random
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grain
import grain.experimental as ge

THREADS = 12
JOIN_S = 90.0
FREE_THREADED_BUILD = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

# One source and one shuffled dataset that every thread's pipelines read: their caches
# (the shuffle's epoch functions and permutations) are filled from many threads at once.
SOURCE = [f"record-{i}" for i in range(997)]
SHARED_SHUFFLE = grain.MapDataset.source(SOURCE).shuffle(seed=7).repeat(4)


def _length(record: str) -> tuple[int, int]:
    return int(record.rpartition("-")[2]), len(record)


def _noisy(x: Any, rng: np.random.Generator) -> tuple[Any, int]:
    return x, int(rng.integers(1 << 30))


def _even(x: Any) -> bool:
    return x[0] % 2 == 0 if isinstance(x, tuple) else x % 2 == 0


def _read_threads(ds: grain.MapDataset, threads: int = 2) -> grain.IterDataset:
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=16))


PIPELINES: dict[str, Callable[[], Any]] = {
    # Shared source and shuffle seed, batched, read by threads.
    "source-shuffle-map-batch-read_threads": lambda: _read_threads(
        grain.MapDataset.source(SOURCE).shuffle(seed=7).repeat(3).map(_length).batch(8)
    ),
    # One shuffled dataset object shared by every thread (shared per-dataset caches).
    "shared-shuffle-object": lambda: _read_threads(SHARED_SHUFFLE.map(_length), threads=3),
    "shared-shuffle-scalar": lambda: SHARED_SHUFFLE.map(_length).to_iter_dataset(),
    "random_map-filter-prefetch": lambda: ge.ThreadPrefetchIterDataset(
        grain.MapDataset.range(1500)
        .shuffle(seed=11)
        .to_iter_dataset(grain.ReadOptions(num_threads=2))
        .random_map(_noisy, seed=3)
        .filter(_even),
        prefetch_buffer_size=4,
    ),
    "mix-window_shuffle": lambda: ge.WindowShuffleIterDataset(
        grain.IterDataset.mix(
            [
                grain.MapDataset.range(800).shuffle(seed=1).to_iter_dataset(),
                grain.MapDataset.source(SOURCE).map(_length).to_iter_dataset(),
            ],
            [2, 1],
        ),
        window_size=16,
        seed=5,
    ),
    "map_mix-batch": lambda: _read_threads(
        grain.MapDataset.mix(
            [grain.MapDataset.range(600).shuffle(seed=2), grain.MapDataset.range(300)], [1, 1]
        ).batch(5, drop_remainder=True)
    ),
    "multithread_prefetch": lambda: ge.multithread_prefetch(
        grain.MapDataset.source(SOURCE).shuffle(seed=7).map(_length).to_iter_dataset(),
        num_threads=3,
        buffer_size=2,
    ),
    # mp_prefetch's workers as threads (the default on 3.13t; the `_worker_threads`
    # fixture chooses them on every interpreter): positional and per-worker execution.
    "mp_prefetch-threads-positional": lambda: (
        grain.MapDataset.source(SOURCE)
        .shuffle(seed=7)
        .map(_length)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .batch(4)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=3))
    ),
    "mp_prefetch-threads-sequential_slice": lambda: (
        grain.MapDataset.range(700)
        .shuffle(seed=9)
        .to_iter_dataset()
        .filter(_even)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2), sequential_slice=True)
    ),
    "stats-interleave": lambda: ge.WithOptionsIterDataset(
        ge.InterleaveIterDataset(
            [grain.MapDataset.range(k * 100, k * 100 + 250).to_iter_dataset() for k in range(4)],
            cycle_length=2,
            iter_buffer_size=2,
        ).batch(4),
        ge.DatasetOptions(execution_tracking_mode=ge.ExecutionTrackingMode.STAGE_TIMING),
    ),
}


def _key(element: Any) -> Any:
    if isinstance(element, tuple):
        return tuple(_key(x) for x in element)
    return tuple(np.asarray(element).ravel().tolist())


def _take(iterator: Any, count: int | None = None) -> list[Any]:
    out = []
    for element in iterator:
        out.append(_key(element))
        if count is not None and len(out) == count:
            break
    return out


def _check_round(name: str, expected: list[Any], rng: random.Random, directory: Path) -> None:
    """One build, iterate, checkpoint, restore and close of pipeline `name`."""
    make = PIPELINES[name]
    stop = rng.randrange(len(expected) // 3, len(expected) + 1)
    middle = rng.randrange(0, stop + 1)
    iterator = iter(make())
    try:
        head = _take(iterator, middle) if middle else []
        state = iterator.get_state()
        saved = rng.random() < 0.3
        if saved:
            asyncio.run(iterator.save(directory))
        tail = _take(iterator, stop - middle) if stop > middle else []
    finally:
        iterator.close()
    assert head + tail == expected[:stop], f"{name}: output differs from a single thread's"
    resumed = iter(make())
    try:
        if saved:
            asyncio.run(resumed.load(directory))
        else:
            resumed.set_state(state)
        rest = _take(resumed, min(len(expected) - middle, 40))
        after = resumed.get_state()
    finally:
        resumed.close()
    assert rest == expected[middle : middle + len(rest)], f"{name}: restored state differs"
    again = iter(make())
    try:
        again.set_state(after)
        assert _take(again, 3) == expected[middle + len(rest) : middle + len(rest) + 3]
    finally:
        again.close()


@pytest.fixture(autouse=True)
def _worker_threads():
    """mp_prefetch's workers are threads here on every interpreter, as on 3.13t."""
    grain.config.update("py_worker_executor", "threads")
    yield
    grain.config.reset("py_worker_executor")


def _assert_gil_stays_off() -> None:
    if FREE_THREADED_BUILD:
        assert not sys._is_gil_enabled(), "an imported module turned the GIL back on"


def _raise_first(errors: list[BaseException]) -> None:
    if errors:
        raise errors[0]


def _run(rounds: int, tmp_path: Path, run_in_threads: Any) -> None:
    _assert_gil_stays_off()
    expected = {}
    for name, make in PIPELINES.items():
        iterator = iter(make())
        expected[name] = _take(iterator)
        iterator.close()
    time.sleep(0.05)
    baseline = threading.active_count()

    def work(index: int) -> None:
        rng = random.Random(index)
        names = list(PIPELINES) * rounds
        rng.shuffle(names)
        for round_, name in enumerate(names):
            _check_round(name, expected[name], rng, tmp_path / f"t{index}-{round_}")

    _raise_first(run_in_threads(work, THREADS, JOIN_S))
    # Every read, prefetch and pipeline thread ends soon after its iterator's close().
    deadline = time.monotonic() + 5.0
    while threading.active_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.02)
    left = [t.name for t in threading.enumerate()]
    assert threading.active_count() <= baseline, f"threads left after close: {left}"
    _assert_gil_stays_off()


@pytest.mark.timeout(120)
def test_many_threads_build_iterate_checkpoint_and_close_pipelines(tmp_path, run_in_threads):
    _run(rounds=1, tmp_path=tmp_path, run_in_threads=run_in_threads)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_many_threads_many_rounds(tmp_path, run_in_threads):
    _run(rounds=8, tmp_path=tmp_path, run_in_threads=run_in_threads)


@pytest.mark.timeout(120)
def test_random_access_to_one_shared_shuffled_dataset_from_threads(run_in_threads):
    # Each batch reads its shuffle vectorized, which caches whole epoch orders (two at a
    # time): jumping between epochs from many threads evicts all the time. Evicting in
    # place raised "dictionary changed size during iteration" or StopIteration here on
    # 3.13t with the GIL off.
    def make() -> grain.MapDataset:
        return grain.MapDataset.range(1500).shuffle(seed=3).repeat(60).batch(16)

    reference = make()
    expected = [reference[i].tolist() for i in range(len(reference))]
    shared = make()

    def work(index: int) -> None:
        rng = random.Random(index)
        for i in (rng.randrange(len(expected)) for _ in range(1500)):
            assert shared[i].tolist() == expected[i], f"batch {i} differs"

    _assert_gil_stays_off()
    _raise_first(run_in_threads(work, 8, JOIN_S))
    _assert_gil_stays_off()


@pytest.mark.timeout(120)
def test_pipeline_stats_while_threads_start_tracked_pipelines(run_in_threads):
    # grain.monitoring lists the live tracked iterators while other threads start and
    # drop them: listing a WeakSet that another thread adds to raised "Set changed size
    # during iteration".
    options = ge.DatasetOptions(execution_tracking_mode=ge.ExecutionTrackingMode.STAGE_TIMING)
    done = threading.Event()

    def work(index: int) -> None:
        if index == 0:
            while not done.is_set():
                for stats in grain.monitoring.pipeline_stats():
                    str(stats)
            return
        ds = ge.WithOptionsIterDataset(grain.MapDataset.range(4).to_iter_dataset(), options)
        live: list[Any] = []  # many live ones: a longer list to copy, a wider window
        try:
            for _ in range(500):
                iterator = iter(ds)
                assert next(iterator) == 0
                live.append(iterator)
                if len(live) > 150:
                    live.clear()
        finally:
            if index == 1:
                done.set()

    _raise_first(run_in_threads(work, 4, JOIN_S))
