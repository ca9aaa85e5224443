"""close() always returns: workers and threads stuck in user code cannot hold it (issue 17).

A transformation that never returns holds its worker process (mp_prefetch, the
DataLoader) or its thread (multithread_prefetch) for good, and a `next()`
waiting for it with it. close() from another thread must then return within
`CLOSE_TIMEOUT_S`, make that `next()` raise the closed-iterator ValueError and
leave no process and no shared memory segment behind; a stuck thread (it
cannot be killed) stays, a daemon that keeps neither the iterator nor the
dataset alive. Before, close() waited for the `next()` forever, and closing
two stuck workers from the same thread took four seconds.
"""

import contextlib
import functools
import gc
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

from grain_dataset import MapDataset, MapTransform, ReadOptions
from grain_dataset.extension import CLOSE_TIMEOUT_S
from grain_index import IndexSampler, NoSharding
from grain_mp import DataLoader, MultiprocessingOptions, multithread_prefetch
from grain_mp._sweep import parse_segment_name, segment_names

# close() from another thread: its bound, with room for a loaded 2-core machine.
CLOSE_LIMIT_S = CLOSE_TIMEOUT_S + 0.5


def _hang_from_20(x):
    # Workers read in chunks of positions: the first ones (up to 14) come out first.
    if x >= 20:
        time.sleep(3600)  # a transformation that never returns
    return np.full(8192, x, np.uint8)  # 8 KB: travels in shared memory


def _hang(x):
    time.sleep(3600)


def _hang_ignoring_sigterm(x):
    while True:  # user code that swallows everything, SystemExit included
        with contextlib.suppress(BaseException):
            time.sleep(3600)


class _HangFrom20(MapTransform):
    def map(self, element):
        return _hang_from_20(element)


def _our_segments():
    return [name for name in segment_names() if parse_segment_name(name)[0] == os.getpid()]


def _wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


class _Consumer:
    """Iterates in a thread of its own, where next() ends up waiting on the stuck reader."""

    def __init__(self, iterator):
        self.got = []
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(iterator,), daemon=True)
        self.thread.start()

    def _run(self, iterator):
        try:
            for element in iterator:
                self.got.append(element)
        except Exception as error:
            # The text only: the traceback would keep the iterator alive.
            self.error = f"{type(error).__name__}: {error}"


def _close_from_another_thread(iterator):
    """Seconds that iterator.close() took in another thread."""
    took = []

    def close():
        started = time.monotonic()
        iterator.close()
        took.append(time.monotonic() - started)

    closer = threading.Thread(target=close, daemon=True)
    closer.start()
    closer.join(CLOSE_LIMIT_S + 5)
    assert not closer.is_alive(), "close() from another thread did not return"
    return took[0]


def _assert_closed_while_waiting(iterator, consumer):
    time.sleep(0.3)  # next() is waiting on the stuck reader now
    assert consumer.thread.is_alive()
    took = _close_from_another_thread(iterator)
    assert took < CLOSE_LIMIT_S
    consumer.thread.join(2)
    assert not consumer.thread.is_alive(), "the pending next() did not end"
    assert consumer.error is not None
    assert re.match(
        r"ValueError: (Trying to advance|Attempting to use) a closed iterator", consumer.error
    )
    with pytest.raises(ValueError, match="closed iterator"):
        next(iterator)
    return took


@pytest.mark.timeout(30)
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_close_from_another_thread_ends_stuck_workers_and_the_pending_next(
    method, monkeypatch, new_threads
):
    monkeypatch.setenv("GRAIN_MP_START_METHOD", method)

    def hang_from_20(x):  # local: the fork server's workers get it by value, not by import
        if x >= 20:
            time.sleep(3600)
        return np.full(8192, x, np.uint8)

    ds = MapDataset.range(40).map(hang_from_20).to_iter_dataset()
    iterator = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    consumer = _Consumer(iterator)
    # Each worker made its elements before the stuck one: segments of ours exist.
    _wait_until(lambda: len(_our_segments()) >= 2)
    _assert_closed_while_waiting(iterator, consumer)
    assert not multiprocessing.active_children()
    assert not _our_segments()
    assert new_threads() == []


@pytest.mark.timeout(30)
def test_close_from_another_thread_ends_stuck_data_loader_workers(new_threads):
    loader = DataLoader(
        data_source=list(range(40)),
        sampler=IndexSampler(40, NoSharding(), num_epochs=1),
        operations=[_HangFrom20()],
        worker_count=2,
    )
    iterator = iter(loader)
    consumer = _Consumer(iterator)
    _wait_until(lambda: len(_our_segments()) >= 2)
    _assert_closed_while_waiting(iterator, consumer)
    assert not multiprocessing.active_children()
    assert not _our_segments()
    assert new_threads() == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("hang", "limit_s"),
    [(_hang, 1.2), (_hang_ignoring_sigterm, 2.5)],
    ids=["stuck", "ignoring-sigterm"],
)
def test_closing_stuck_workers_takes_at_most_two_seconds_for_all_of_them(hang, limit_s):
    # Asked (0.5 s), terminated (0.5 s), then killed, all workers at once. No read
    # threads: `hang` runs in each worker's main thread, where SIGTERM lands.
    ds = MapDataset.range(40).map(hang).to_iter_dataset(ReadOptions(num_threads=0))
    iterator = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=3)))
    iterator.start_prefetch()
    _wait_until(lambda: len(multiprocessing.active_children()) == 3)
    time.sleep(0.5)  # every worker is inside `hang` now
    started = time.monotonic()
    iterator.close()
    assert time.monotonic() - started < limit_s
    assert not multiprocessing.active_children()


def _hang_at(release, stuck, x):
    if x == 4:
        stuck.set()
        release.wait(60)  # never returns while the test runs; released at its end
    return x


@pytest.mark.timeout(30)
def test_close_from_another_thread_leaves_only_the_stuck_thread_and_nothing_it_holds(
    new_threads,
):
    release, stuck = threading.Event(), threading.Event()
    source = MapDataset.range(40).map(functools.partial(_hang_at, release, stuck))
    ds = multithread_prefetch(
        source.to_iter_dataset(ReadOptions(num_threads=0)), num_threads=2, buffer_size=2
    )
    iterator = iter(ds)
    consumer = _Consumer(iterator)
    try:
        stuck.wait(10)
        _assert_closed_while_waiting(iterator, consumer)
        # Thread 0 (elements 0, 2, 4, ...) is stuck at 4; thread 1 stops (within POLL_S).
        _wait_until(lambda: len(new_threads()) == 1, timeout=2)
        left = new_threads()
        assert [t.name for t in left] == ["grain-multithread-prefetch-0"]
        assert left[0].daemon
        # It holds its own copy of the pipeline, not the iterator nor this stage.
        refs = [weakref.ref(iterator), weakref.ref(ds)]
        del iterator, ds, consumer
        gc.collect()
        assert [ref() for ref in refs] == [None, None]
    finally:
        release.set()
    left[0].join(5)
    assert not left[0].is_alive()


EXIT_SCRIPT = """
import threading
import time

from grain_dataset import MapDataset, MapTransform, ReadOptions
from grain_index import IndexSampler, NoSharding
from grain_mp import DataLoader, MultiprocessingOptions, multithread_prefetch


def hang(x):
    time.sleep(3600)
    return x


class Hang(MapTransform):
    def map(self, element):
        return hang(element)


source = MapDataset.range(8).map(hang)
pipelines = [
    source.to_iter_dataset().mp_prefetch(MultiprocessingOptions(num_workers=2)),
    multithread_prefetch(source.to_iter_dataset(ReadOptions(num_threads=0)), 2, 2),
    DataLoader(
        data_source=list(range(8)),
        sampler=IndexSampler(8, NoSharding(), num_epochs=1),
        operations=[Hang()],
        worker_count=2,
    ),
]
for pipeline in pipelines:
    iterator = iter(pipeline)
    errors = []

    def consume():
        try:
            next(iterator)
        except ValueError as error:
            errors.append(str(error))

    consumer = threading.Thread(target=consume)  # not a daemon: exit would wait for it
    consumer.start()
    time.sleep(0.5)
    iterator.close()
    consumer.join()
    assert errors and "closed iterator" in errors[0], errors
print("closed all")
"""


@pytest.mark.timeout(60)
def test_the_interpreter_exits_after_closing_stuck_pipelines(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "closed all" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
