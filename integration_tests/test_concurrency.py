"""The concurrency contract: one iterator, several threads, no corruption and no deadlock.

The iterator a user holds (from ``iter(ds)`` or ``iter(data_loader)``)
serializes ``next()``, ``get_state()``, ``set_state()`` and ``close()``
(`grain_dataset._runtime._guard`; "Thread safety" in docs/troubleshooting.md). So two
threads calling
``next()`` on one iterator get distinct elements that together are exactly the
single-threaded stream; a state taken by another thread while one iterates is
always a position between two elements, which restores exactly; ``close()``
from another thread neither deadlocks nor loses an element. Before the guard,
the same calls handed out elements twice (to_iter_dataset: 19 320 of 20 000
duplicated), drew random numbers twice, deadlocked (ThreadPrefetch,
device_put) or corrupted worker pipes (mp_prefetch, DataLoader workers).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import grain
import grain.experimental as ge

N = 4000
JOIN_S = 60.0


def _base(n: int = N, threads: int = 0) -> grain.IterDataset:
    return grain.MapDataset.range(n).to_iter_dataset(grain.ReadOptions(num_threads=threads))


def _with_random(x: int, rng: np.random.Generator) -> tuple[int, int]:
    return x, int(rng.integers(1 << 30))


def _loader(workers: int) -> grain.python.DataLoader:
    sampler = grain.python.IndexSampler(
        N, shard_options=grain.python.NoSharding(), shuffle=True, num_epochs=1, seed=5
    )
    return grain.python.DataLoader(
        data_source=grain.python.RangeDataSource(0, N, 1), sampler=sampler, worker_count=workers
    )


def _device_put() -> grain.IterDataset:
    import jax

    return ge.device_put(_base().batch(4), jax.devices()[0])


PIPELINES: dict[str, Callable[[], Any]] = {
    "to_iter_dataset": lambda: _base(),
    "to_iter_dataset with threads": lambda: _base(threads=4),
    "random_map": lambda: _base().random_map(_with_random, seed=3),
    "map_with_index + batch": lambda: _base().map_with_index(lambda i, x: (i, x)).batch(7),
    "ThreadPrefetch": lambda: ge.ThreadPrefetchIterDataset(_base(), prefetch_buffer_size=4),
    "interleave with threads": lambda: ge.InterleaveIterDataset(
        [_base(1000), _base(1000), _base(1000)], cycle_length=2, iter_buffer_size=2
    ),
    "mix + window shuffle": lambda: ge.WindowShuffleIterDataset(
        grain.IterDataset.mix([_base(), _base(N // 2)], [2, 1]), window_size=16, seed=1
    ),
    "mp_prefetch": lambda: _base().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)),
    "device_put": _device_put,
    "DataLoader": lambda: _loader(0),
    "DataLoader with workers": lambda: _loader(2),
}


def _key(element: Any) -> Any:
    if isinstance(element, tuple):
        return tuple(_key(x) for x in element)
    return tuple(np.asarray(element).ravel().tolist())


def _from_threads(
    run_in_threads: Any, iterator: Any, count: int, pause: float = 0.0
) -> tuple[list[list[Any]], list[BaseException]]:
    """Runs ``for x in iterator`` in `count` threads at once; what each got, and errors.

    `pause`: seconds each thread sleeps after an element, so that every thread gets
    turns even where one could drain a fast pipeline within its GIL time slice.
    """
    got: list[list[Any]] = [[] for _ in range(count)]

    def consume(index: int) -> None:
        for element in iterator:
            got[index].append(_key(element))
            if pause:
                time.sleep(pause)

    return got, run_in_threads(consume, count, JOIN_S)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("make", PIPELINES.values(), ids=PIPELINES.keys())
def test_two_threads_calling_next_share_the_stream_exactly(make, run_in_threads):
    expected = collections.Counter(_key(element) for element in make())
    iterator = iter(make())
    try:
        got, errors = _from_threads(run_in_threads, iterator, 2, pause=0.0005)
    finally:
        iterator.close()
    assert not errors, errors
    together = collections.Counter(got[0] + got[1])
    duplicated = sum((together - expected).values())
    lost = sum((expected - together).values())
    assert (duplicated, lost) == (0, 0), f"{duplicated} duplicated, {lost} lost"
    assert all(got), "each thread should have taken some elements"


@pytest.mark.timeout(120)
def test_four_threads_on_one_iterator_with_threads_and_workers(run_in_threads):
    make = lambda: ge.ThreadPrefetchIterDataset(  # noqa: E731
        _base(threads=2).batch(3).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)),
        prefetch_buffer_size=2,
    )
    expected = collections.Counter(_key(element) for element in make())
    iterator = iter(make())
    try:
        got, errors = _from_threads(run_in_threads, iterator, 4)
    finally:
        iterator.close()
    assert not errors, errors
    assert collections.Counter(element for part in got for element in part) == expected


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["to_iter_dataset with threads", "mp_prefetch", "DataLoader"])
def test_a_state_taken_by_another_thread_is_a_position_between_elements(name):
    make = PIPELINES[name]
    reference = [_key(element) for element in make()]
    iterator = iter(make())
    states: list[Any] = []
    done = threading.Event()

    def checkpointer() -> None:
        while not done.is_set() and len(states) < 12:
            states.append(iterator.get_state())
            time.sleep(0.001)

    thread = threading.Thread(target=checkpointer, daemon=True)
    thread.start()
    try:
        consumed = [_key(element) for element in iterator]
    finally:
        done.set()
        thread.join(JOIN_S)
        iterator.close()
    assert consumed == reference
    assert len(states) >= 2
    # A position is where 3 consecutive elements start, or the last few before the end.
    positions = {tuple(reference[i : i + 3]) for i in range(len(reference) + 1)}
    for state in states:
        fresh = iter(make())
        following: list[Any] = []
        try:
            fresh.set_state(state)
            for element in fresh:
                following.append(_key(element))
                if len(following) == 3:
                    break
        finally:
            fresh.close()
        assert tuple(following) in positions, f"state {state!r} restores to no position"


def _slowly(x: int) -> int:
    time.sleep(0.0005)
    return x


def _slow_device_put() -> grain.IterDataset:
    import jax

    return ge.device_put(_base(600).map(_slowly).batch(2), jax.devices()[0])


SLOW: dict[str, Callable[[], Any]] = {
    "ThreadPrefetch": lambda: ge.ThreadPrefetchIterDataset(
        _base(600).map(_slowly), prefetch_buffer_size=4
    ),
    "mp_prefetch": lambda: (
        _base(600).map(_slowly).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    ),
    "device_put": _slow_device_put,
    "DataLoader with workers": lambda: grain.python.DataLoader(
        data_source=grain.python.RangeDataSource(0, 600, 1),
        sampler=grain.python.IndexSampler(
            600, shard_options=grain.python.NoSharding(), num_epochs=1
        ),
        operations=[_Slow()],
        worker_count=2,
    ),
}


class _Slow(grain.python.MapTransform):
    def map(self, element: int) -> int:
        return _slowly(element)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", SLOW.keys())
def test_close_from_another_thread_neither_deadlocks_nor_loses_elements(name):
    make = SLOW[name]
    expected = [_key(element) for element in make()]
    iterator = iter(make())
    got: list[Any] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for element in iterator:
                got.append(_key(element))
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    closes_while_running = 0
    for _ in range(3):
        time.sleep(0.05)
        closes_while_running += thread.is_alive()
        closer = threading.Thread(target=iterator.close, daemon=True)
        closer.start()
        closer.join(JOIN_S)
        assert not closer.is_alive(), "close() from another thread deadlocked"
    thread.join(JOIN_S)
    assert not thread.is_alive(), "next() deadlocked after close() from another thread"
    iterator.close()
    assert closes_while_running, "the stream ended before the first close()"
    # close() is an end, as in Grain: the consumer's next() was told so ...
    assert len(errors) == 1, errors
    assert isinstance(errors[0], ValueError)
    assert "closed iterator" in str(errors[0])
    # ... and nothing is lost: the state, taken after close, resumes the rest exactly.
    assert got == expected[: len(got)]
    resumed = iter(make())
    resumed.set_state(iterator.get_state())
    assert got + [_key(element) for element in resumed] == expected
    resumed.close()
