"""ThreadPrefetchIterDataset: the parent's stream, read ahead by one background thread.

What must hold: the same elements as the parent; a state that is the parent's
state at the last element returned (so read-ahead never shows and states move
freely between buffer sizes); reading really overlaps with the consumer, but
never more than `prefetch_buffer_size` ahead; errors at their own position
with their own type and traceback; and no thread outliving its iterator, nor
any noise at interpreter exit.
"""

import gc
import random
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import pytest

from grain_dataset import DatasetIterator, IterDataset, MapDataset, ReadOptions, without_fingerprint
from grain_dataset._common._conformance import assert_equal_output_after_checkpoint
from grain_dataset._core._state import check_state
from grain_dataset._threads._thread_prefetch import THREAD_NAME, ThreadPrefetchIterDataset

pytestmark = pytest.mark.timeout(60)

SIZES = [0, 1, 3, 64]


class Counting(IterDataset):
    """0, 1, ..., n - 1, calling `hook(i)` before producing i; i in `fail_at` raises."""

    def __init__(self, n, hook=None, fail_at=()):
        super().__init__()
        self.n, self.hook, self.fail_at = n, hook, set(fail_at)
        self.closed = threading.Event()
        self.prefetch_started = threading.Event()

    def __iter__(self):
        return CountingIterator(self)


class CountingIterator(DatasetIterator):
    def __init__(self, dataset):
        super().__init__()
        self._ds = dataset
        self._next = 0

    def __next__(self):
        i = self._next
        if i >= self._ds.n:
            raise StopIteration
        self._next += 1
        if self._ds.hook is not None:
            self._ds.hook(i)
        if i in self._ds.fail_at:
            raise ValueError(f"element {i} is bad")
        return i

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        check_state(state, "Counting", ("next",))
        self._next = state["next"]

    def start_prefetch(self):
        self._ds.prefetch_started.set()

    def close(self):
        self._ds.closed.set()


def prefetch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()}


def still_alive(threads, timeout: float = 5.0) -> list[threading.Thread]:
    """The threads of `threads` still alive after waiting up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t for t in threads if t.is_alive()]


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def pipeline(n: int = 40) -> IterDataset:
    ds = MapDataset.range(n).map(lambda x: x * 3).to_iter_dataset(ReadOptions(num_threads=2))
    return ds.filter(lambda x: x % 2 == 0).map_with_index(lambda i, x: (i, x))


# -- the stream ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_yields_the_parents_elements(size):
    parent = pipeline()
    assert list(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=size)) == list(parent)


@pytest.mark.parametrize("size", SIZES)
def test_end_is_raised_again_and_again(size):
    it = iter(ThreadPrefetchIterDataset(Counting(3), prefetch_buffer_size=size))
    assert list(it) == [0, 1, 2]
    for _ in range(3):
        with pytest.raises(StopIteration):
            next(it)


def test_empty_parent_yields_nothing():
    assert list(ThreadPrefetchIterDataset(Counting(0), prefetch_buffer_size=2)) == []


def test_composes_with_later_stages():
    ds = ThreadPrefetchIterDataset(Counting(10), prefetch_buffer_size=2).map(lambda x: -x)
    batches = [batch.tolist() for batch in ds.batch(4)]
    assert batches == [[0, -1, -2, -3], [-4, -5, -6, -7], [-8, -9]]


# -- state --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 5])
def test_state_is_the_parents_state_at_the_last_returned_element(size):
    parent = pipeline()
    mirror = iter(parent)
    it = iter(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=size))
    assert it.get_state() == mirror.get_state()
    for value in it:
        assert value == next(mirror)
        assert it.get_state() == mirror.get_state()
    with pytest.raises(StopIteration):
        next(mirror)
    assert it.get_state() == mirror.get_state()


def test_changing_a_returned_state_changes_nothing():
    it = iter(ThreadPrefetchIterDataset(Counting(10), prefetch_buffer_size=2))
    next(it)
    it.get_state()["next"] = 7
    assert without_fingerprint(it.get_state()) == {"next": 1}
    assert next(it) == 1


@pytest.mark.parametrize("size", SIZES)
def test_checkpoint_conformance(size):
    assert_equal_output_after_checkpoint(
        ThreadPrefetchIterDataset(pipeline(30), prefetch_buffer_size=size)
    )
    assert_equal_output_after_checkpoint(
        ThreadPrefetchIterDataset(Counting(12), prefetch_buffer_size=size)
    )


@pytest.mark.parametrize(("saved_with", "restored_with"), [(4, 0), (0, 4), (1, 64)])
def test_state_moves_between_buffer_sizes_and_to_the_bare_parent(saved_with, restored_with):
    parent = pipeline()
    it = iter(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=saved_with))
    head = [next(it) for _ in range(7)]
    state = it.get_state()
    rest = list(it)
    other = iter(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=restored_with))
    other.set_state(state)
    assert list(other) == rest
    bare = iter(parent)
    bare.set_state(state)
    assert head + list(bare) == list(parent)[:7] + rest


@pytest.mark.timeout(60)
def test_a_rejected_state_loses_no_element():
    produced = []
    it = iter(ThreadPrefetchIterDataset(Counting(20, produced.append), prefetch_buffer_size=4))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    assert wait_until(lambda: len(produced) == 7)  # 4 elements read ahead
    with pytest.raises(ValueError, match="Counting"):
        it.set_state({"position": 3})
    assert without_fingerprint(it.get_state()) == {"next": 3}
    assert list(it) == list(range(3, 20))


# -- read-ahead ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_start_prefetch_reads_ahead_at_most_buffer_size_elements():
    produced = []
    it = iter(ThreadPrefetchIterDataset(Counting(100, produced.append), prefetch_buffer_size=3))
    it.start_prefetch()
    assert wait_until(lambda: len(produced) == 3)
    time.sleep(0.05)  # time enough to read past the bound, were it not enforced
    assert len(produced) == 3
    assert without_fingerprint(it.get_state()) == {"next": 0}
    assert next(it) == 0
    assert wait_until(lambda: len(produced) == 4)
    time.sleep(0.05)
    assert len(produced) == 4
    it.close()


@pytest.mark.timeout(60)
def test_parent_reads_the_next_element_while_the_consumer_works():
    asked_for_1 = threading.Event()

    def hook(i):
        if i == 1:
            asked_for_1.set()

    it = iter(ThreadPrefetchIterDataset(Counting(5, hook), prefetch_buffer_size=1))
    assert next(it) == 0
    # Nobody called next() again: only a background thread can be producing 1.
    assert asked_for_1.wait(timeout=10)
    it.close()

    asked_for_1.clear()
    it = iter(ThreadPrefetchIterDataset(Counting(5, hook), prefetch_buffer_size=0))
    assert next(it) == 0
    assert not asked_for_1.wait(timeout=0.2)  # without a buffer nothing runs ahead


@pytest.mark.timeout(60)
def test_slow_parent_overlaps_with_a_slow_consumer():
    n, delay = 12, 0.04
    ds = Counting(n, lambda i: time.sleep(delay))
    began = time.perf_counter()
    for _ in ThreadPrefetchIterDataset(ds, prefetch_buffer_size=2):
        time.sleep(delay)
    elapsed = time.perf_counter() - began
    serial = 2 * n * delay
    assert elapsed < serial / 1.3, f"{elapsed:.3f}s is not faster than serial ({serial:.3f}s)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [0, 2])
def test_start_prefetch_reaches_the_parent(size):
    parent = Counting(50)
    it = iter(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=size))
    assert not parent.prefetch_started.is_set()
    it.start_prefetch()
    assert parent.prefetch_started.wait(timeout=10)
    it.close()


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [0, 1, 4])
def test_error_is_raised_at_its_position_and_reading_goes_on(size):
    it = iter(ThreadPrefetchIterDataset(Counting(10, fail_at={5}), prefetch_buffer_size=size))
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="element 5 is bad") as info:
        next(it)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "__next__" in frames  # the parent's frame that raised is kept
    assert without_fingerprint(it.get_state()) == {
        "next": 6
    }  # the parent's state right after the error
    assert list(it) == [6, 7, 8, 9]


@pytest.mark.timeout(60)
def test_consecutive_errors_are_each_raised_once():
    it = iter(ThreadPrefetchIterDataset(Counting(6, fail_at={1, 2}), prefetch_buffer_size=3))
    got = []
    errors = []
    while True:
        try:
            got.append(next(it))
        except StopIteration:
            break
        except ValueError as error:
            errors.append(str(error))
    assert got == [0, 3, 4, 5]
    assert errors == ["element 1 is bad", "element 2 is bad"]


@pytest.mark.parametrize(
    ("size", "error"),
    [(-1, ValueError), (1.5, TypeError), ("3", TypeError), (None, TypeError), (True, TypeError)],
)
def test_bad_prefetch_buffer_size_is_rejected(size, error):
    with pytest.raises(error, match="prefetch_buffer_size"):
        ThreadPrefetchIterDataset(Counting(3), prefetch_buffer_size=size)


def test_parent_must_be_an_iter_dataset():
    # A MapDataset is read with to_iter_dataset(), as Grain accepts it.
    ds = ThreadPrefetchIterDataset(MapDataset.range(3), prefetch_buffer_size=1)
    assert list(ds) == [0, 1, 2]
    with pytest.raises(TypeError, match="IterDataset"):
        ThreadPrefetchIterDataset([1, 2, 3], prefetch_buffer_size=1)


def test_prefetch_buffer_size_is_keyword_only():
    with pytest.raises(TypeError):
        ThreadPrefetchIterDataset(Counting(3), 2)


# -- shutdown -------------------------------------------------------------------------------


def started_iterator(ds):
    """An iterator with its thread running, and that thread."""
    before = prefetch_threads()
    it = iter(ds)
    next(it)
    new = prefetch_threads() - before
    assert len(new) == 1
    return it, new


@pytest.mark.timeout(60)
def test_close_stops_the_thread_and_closes_the_parent():
    parent = Counting(1000)
    it, threads = started_iterator(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=4))
    it.close()
    assert still_alive(threads) == []
    assert parent.closed.is_set()
    it.close()  # idempotent


@pytest.mark.timeout(60)
def test_del_and_garbage_collection_stop_the_thread():
    it, threads = started_iterator(
        ThreadPrefetchIterDataset(Counting(1000), prefetch_buffer_size=4)
    )
    del it
    assert still_alive(threads) == []

    it, threads = started_iterator(
        ThreadPrefetchIterDataset(Counting(1000), prefetch_buffer_size=4)
    )
    it.cycle = it  # only the garbage collector can free it
    del it
    gc.collect()
    assert still_alive(threads) == []


@pytest.mark.timeout(60)
def test_thread_ends_with_the_stream():
    it, threads = started_iterator(ThreadPrefetchIterDataset(Counting(5), prefetch_buffer_size=2))
    assert list(it) == [1, 2, 3, 4]
    assert still_alive(threads) == []


@pytest.mark.timeout(60)
def test_close_does_not_wait_for_a_slow_parent_and_the_parent_is_closed_after_it():
    release = threading.Event()
    parent = Counting(100, lambda i: i == 1 and release.wait(timeout=30))
    it, threads = started_iterator(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=2))
    began = time.monotonic()
    it.close()
    assert time.monotonic() - began < 1
    assert not parent.closed.is_set()  # the thread is still inside next(parent)
    release.set()
    assert still_alive(threads) == []
    assert parent.closed.wait(timeout=5)


@pytest.mark.timeout(60)
def test_set_state_replaces_the_thread():
    it, threads = started_iterator(ThreadPrefetchIterDataset(Counting(30), prefetch_buffer_size=3))
    it.set_state({"next": 20})
    assert still_alive(threads) == []
    assert list(it) == list(range(20, 30))


@pytest.mark.timeout(60)
def test_interpreter_exit_is_silent():
    code = textwrap.dedent(
        """
        import time
        from grain_dataset import MapDataset
        from grain_dataset._threads._thread_prefetch import ThreadPrefetchIterDataset

        def slow(x):
            time.sleep(0.5)
            return x

        full = iter(ThreadPrefetchIterDataset(
            MapDataset.range(1000).to_iter_dataset(), prefetch_buffer_size=2))
        next(full)
        busy = iter(ThreadPrefetchIterDataset(
            MapDataset.range(1000).map(slow).to_iter_dataset(), prefetch_buffer_size=2))
        busy.start_prefetch()
        time.sleep(0.1)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.stderr == ""
    assert result.returncode == 0
    assert result.stdout == "ok\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(4))
def test_random_operations_behave_like_the_bare_parent(seed):
    """next/get_state/set_state/start_prefetch in a random order, against the parent alone."""
    rng = random.Random(seed)
    parent = Counting(60, fail_at={13, 14, 40})
    model = iter(parent)
    it = iter(ThreadPrefetchIterDataset(parent, prefetch_buffer_size=rng.choice([1, 2, 7])))
    saved = [model.get_state()]
    for _ in range(300):
        op = rng.random()
        if op < 0.75:
            want, got = outcome(model), outcome(it)
            assert got == want
        elif op < 0.85:
            assert it.get_state() == model.get_state()
            saved.append(model.get_state())
        elif op < 0.97:
            state = rng.choice(saved)
            model.set_state(state)
            it.set_state(state)
        else:
            it.start_prefetch()
    it.close()


def outcome(iterator):
    """What next() does: ("value", v), ("error", message) or ("end",)."""
    try:
        return ("value", next(iterator))
    except StopIteration:
        return ("end",)
    except ValueError as error:
        return ("error", str(error))
