"""close() always returns: read threads stuck in a transformation cannot hold it (issue 17).

A transformation that never returns holds its read thread (to_iter_dataset's
readers, ThreadPrefetchIterDataset's producer) for good, and a `next()`
waiting for that thread with it. close() from another thread must then return
within `CLOSE_TIMEOUT_S` and make that `next()` raise the closed-iterator
ValueError; the iterator stays closed. The stuck thread cannot be killed: it
stays, a daemon, holding only what it runs (the MapDataset or the parent
iterator), so the iterator and the datasets above the stuck stage can be
collected, and the interpreter still exits. Before, close() waited for the
`next()` forever.

Here the transformation waits on an Event that the test sets at its end, so
that the thread does not outlive the test; the exit test hangs for real.
"""

import functools
import gc
import re
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

from grain_dataset import MapDataset, ReadOptions
from grain_dataset._runtime._guard import CLOSE_TIMEOUT_S
from grain_dataset._threads._thread_prefetch import THREAD_NAME, ThreadPrefetchIterDataset

# close() from another thread: its bound, with room for a loaded 2-core machine.
CLOSE_LIMIT_S = CLOSE_TIMEOUT_S + 0.5


def _hang_at_4(release, stuck, x):
    if x == 4:
        stuck.set()
        release.wait(60)  # never returns while the test runs
    return x


def _same(x):
    return x


def _read_threads(hang):
    # One reader thread stuck at 4; a second may start beside it (the first chunk is slow).
    ds = MapDataset.range(40).map(hang).to_iter_dataset(ReadOptions(num_threads=4))
    return ds.map(_same), "grain-read"


def _thread_prefetch(hang):
    parent = MapDataset.range(40).to_iter_dataset(ReadOptions(num_threads=0)).map(hang)
    return ThreadPrefetchIterDataset(parent, prefetch_buffer_size=2), THREAD_NAME


class _Consumer:
    """Iterates in a thread of its own, where next() ends up waiting on the stuck thread."""

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
    """Seconds that iterator.close() took in another thread (the consumer's is stuck)."""
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


def _new_threads(before):
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("make", [_read_threads, _thread_prefetch])
def test_close_from_another_thread_returns_and_the_pending_next_raises(make):
    release, stuck = threading.Event(), threading.Event()
    before = set(threading.enumerate())
    ds, stuck_name = make(functools.partial(_hang_at_4, release, stuck))
    iterator = iter(ds)
    consumer = _Consumer(iterator)
    try:
        assert stuck.wait(10)
        time.sleep(0.3)  # next() is waiting on the stuck thread now
        assert consumer.thread.is_alive()
        assert _close_from_another_thread(iterator) < CLOSE_LIMIT_S
        consumer.thread.join(2)
        assert not consumer.thread.is_alive(), "the pending next() did not end"
        assert consumer.error is not None
        assert re.match(
            r"ValueError: (Trying to advance|Attempting to use) a closed iterator", consumer.error
        )
        assert consumer.got == list(range(len(consumer.got)))  # nothing out of order
        with pytest.raises(ValueError, match="closed iterator"):
            next(iterator)
        # Only the stuck thread is left: a daemon. (Idle readers end on their own,
        # shortly after the close.)
        deadline = time.monotonic() + 5
        while len(_new_threads(before)) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        left = _new_threads(before)
        assert [t.name for t in left] == [stuck_name]
        assert left[0].daemon
        # It keeps neither the iterator nor this dataset alive.
        refs = [weakref.ref(iterator), weakref.ref(ds)]
        del iterator, ds, consumer
        gc.collect()
        assert [ref() for ref in refs] == [None, None]
    finally:
        release.set()
    left[0].join(5)
    assert not left[0].is_alive()


@pytest.mark.timeout(30)
def test_close_returns_even_while_next_runs_the_stuck_function_in_its_own_thread():
    # No thread of the pipeline to interrupt: the consumer itself is stuck. close()
    # returns at its deadline; the close finishes once the function returns.
    release, stuck = threading.Event(), threading.Event()
    before = set(threading.enumerate())
    hang = functools.partial(_hang_at_4, release, stuck)
    ds = MapDataset.range(8).to_iter_dataset(ReadOptions(num_threads=0)).map(hang)
    iterator = iter(ds)
    consumer = _Consumer(iterator)
    try:
        assert stuck.wait(10)
        assert _close_from_another_thread(iterator) < CLOSE_LIMIT_S
        assert consumer.thread.is_alive()  # still inside the function
        with pytest.raises(ValueError, match="closed iterator"):
            next(iterator)
    finally:
        release.set()
    consumer.thread.join(5)
    assert not consumer.thread.is_alive()
    # The element being made was handed out: nothing is lost.
    assert consumer.got == [0, 1, 2, 3, 4]
    assert re.match(
        r"ValueError: (Trying to advance|Attempting to use) a closed iterator", consumer.error
    )
    waited = time.monotonic() + 5
    while _new_threads(before) and time.monotonic() < waited:
        time.sleep(0.02)
    assert not _new_threads(before)  # the close finished in the background


EXIT_SCRIPT = """
import threading
import time

from grain_dataset import MapDataset, ReadOptions
from grain_dataset._threads._thread_prefetch import ThreadPrefetchIterDataset


def hang(x):
    time.sleep(3600)
    return x


pipelines = [
    MapDataset.range(8).map(hang).to_iter_dataset(ReadOptions(num_threads=4)),
    ThreadPrefetchIterDataset(
        MapDataset.range(8).to_iter_dataset(ReadOptions(num_threads=0)).map(hang),
        prefetch_buffer_size=2,
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
    time.sleep(0.3)
    iterator.close()
    consumer.join()
    assert errors and "closed iterator" in errors[0], errors
print("closed all")
"""


@pytest.mark.timeout(60)
def test_the_interpreter_exits_with_threads_stuck_in_a_transformation(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "closed all" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
