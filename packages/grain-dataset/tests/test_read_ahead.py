"""`MapDataset.to_iter_dataset`: the thread read-ahead behind every IterDataset.

What must hold whatever `ReadOptions` say: one epoch of the non-None elements,
in order; a state ``{"next_index": i}`` that knows nothing of the read-ahead
(so it moves freely between thread counts); errors raised at their own
position with their own type and traceback; and no reader thread outliving its
iterator, nor any noise at interpreter exit.
"""

import collections
import gc
import hashlib
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import numpy as np
import pytest

from grain_dataset import (
    DatasetOptions,
    MapDataset,
    ReadOptions,
    WithOptionsIterDataset,
    without_fingerprint,
)

pytestmark = pytest.mark.timeout(60)

THREADS = [0, 1, 4, 16]
READER = "grain-read"


def reader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == READER and t.is_alive()}


def still_alive(threads: set[threading.Thread], timeout: float = 5.0) -> list[threading.Thread]:
    """The threads of `threads` still alive after waiting up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t for t in threads if t.is_alive()]


def jitter(x: int) -> int:
    """Makes some elements slow, so that chunks finish out of order in the pool."""
    if x % 7 == 0:
        time.sleep(0.0003)
    return x


def keep(x: int) -> bool:
    return x % 3 != 0


def read_until_error(iterator) -> tuple[list, Exception]:
    """The elements before the first error, and the error."""
    delivered = []
    while True:
        try:
            delivered.append(next(iterator))
        except StopIteration:
            pytest.fail(f"no error after {len(delivered)} elements")
        except Exception as error:
            return delivered, error


def drain(iterator) -> tuple[list, list[BaseException]]:
    """Everything `iterator` yields, collecting (and stepping over) errors."""
    values, errors = [], []
    while True:
        try:
            values.append(next(iterator))
        except StopIteration:
            return values, errors
        except Exception as error:
            errors.append(error)
            if len(errors) > 10:
                raise


# -- order and Nones ---------------------------------------------------------------------


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("buffer_size", [0, 1, 3, 500])
def test_yields_non_none_elements_of_one_epoch_in_order(num_threads, buffer_size):
    ds = MapDataset.range(400).map(jitter).filter(keep)
    options = ReadOptions(num_threads=num_threads, prefetch_buffer_size=buffer_size)
    assert list(ds.to_iter_dataset(options)) == [x for x in range(400) if keep(x)]


@pytest.mark.parametrize("num_threads", THREADS)
def test_allow_nones_yields_the_filtered_positions_as_none(num_threads):
    ds = MapDataset.range(100).filter(keep)
    options = ReadOptions(num_threads=num_threads, prefetch_buffer_size=7)
    got = list(ds.to_iter_dataset(options, allow_nones=True))
    assert got == [x if keep(x) else None for x in range(100)]


def test_default_read_options_give_the_same_elements():
    ds = MapDataset.range(1000).shuffle(seed=4).filter(keep)
    assert list(ds.to_iter_dataset()) == list(ds.to_iter_dataset(ReadOptions(num_threads=0)))
    assert sorted(ds.to_iter_dataset()) == [x for x in range(1000) if keep(x)]


def test_iterating_twice_gives_the_same_epoch():
    ds = MapDataset.range(50).shuffle(seed=1).to_iter_dataset(ReadOptions(num_threads=4))
    assert list(ds) == list(ds)


def test_empty_dataset_yields_nothing():
    for num_threads in THREADS:
        assert list(MapDataset.range(0).to_iter_dataset(ReadOptions(num_threads=num_threads))) == []


@pytest.mark.parametrize("num_threads", [0, 1, 16])
@pytest.mark.parametrize("buffer_size", [1, 500])
def test_long_stretches_of_none_do_not_stall(num_threads, buffer_size):
    ds = MapDataset.range(20_000).filter(lambda x: x % 5_000 == 7)
    ds = ds.to_iter_dataset(ReadOptions(num_threads=num_threads, prefetch_buffer_size=buffer_size))
    ds = WithOptionsIterDataset(ds, DatasetOptions(filter_warn_threshold_ratio=None))
    began = time.monotonic()
    assert list(ds) == [7, 5_007, 10_007, 15_007]
    assert time.monotonic() - began < 20


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"num_threads": -1}, ValueError),
        ({"prefetch_buffer_size": -1}, ValueError),
        ({"num_threads": 1.5}, TypeError),
        ({"num_threads": "4"}, TypeError),
        ({"prefetch_buffer_size": None}, TypeError),
    ],
)
def test_read_options_reject_bad_values(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        ReadOptions(**kwargs)


def test_to_iter_dataset_rejects_what_is_not_read_options():
    with pytest.raises(TypeError, match="read_options"):
        MapDataset.range(3).to_iter_dataset({"num_threads": 2})


# -- state ---------------------------------------------------------------------------------


@pytest.mark.parametrize("num_threads", THREADS)
def test_state_is_the_position_after_the_last_returned_element(num_threads):
    ds = MapDataset.range(20).filter(lambda x: x % 4 == 0)
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads, prefetch_buffer_size=3)))
    assert without_fingerprint(it.get_state()) == {"next_index": 0}
    for expected in [0, 4, 8, 12, 16]:
        assert next(it) == expected
        assert without_fingerprint(it.get_state()) == {"next_index": expected + 1}
    with pytest.raises(StopIteration):
        next(it)
    end = it.get_state()
    fresh = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads)))
    fresh.set_state(end)
    assert list(fresh) == []
    it.close()


@pytest.mark.parametrize("num_threads", [0, 4])
def test_state_with_allow_nones_counts_every_position(num_threads):
    ds = MapDataset.range(10).filter(keep)
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads), allow_nones=True))
    for k in range(10):
        next(it)
        assert without_fingerprint(it.get_state()) == {"next_index": k + 1}
    it.close()


def test_state_does_not_show_the_read_ahead():
    ds = MapDataset.range(300).shuffle(seed=3).filter(keep)
    serial = iter(ds.to_iter_dataset(ReadOptions(num_threads=0)))
    threaded = iter(ds.to_iter_dataset(ReadOptions(num_threads=16, prefetch_buffer_size=50)))
    threaded.start_prefetch()
    for _ in range(len(ds) // 3 * 2):
        assert next(threaded) == next(serial)
        assert threaded.get_state() == serial.get_state()
    threaded.close()


@pytest.mark.parametrize(("saved_with", "restored_with"), [(16, 0), (0, 16), (4, 1), (1, 4)])
def test_state_moves_between_thread_counts(saved_with, restored_with):
    ds = MapDataset.range(40).shuffle(seed=9).repeat(3).filter(keep)
    expected = list(ds.to_iter_dataset(ReadOptions(num_threads=0)))
    for k in [0, 1, 5, 39, len(expected) - 1, len(expected)]:
        it = iter(ds.to_iter_dataset(ReadOptions(num_threads=saved_with, prefetch_buffer_size=9)))
        head = [next(it) for _ in range(k)]
        state = it.get_state()
        it.close()
        fresh = iter(ds.to_iter_dataset(ReadOptions(num_threads=restored_with)))
        fresh.set_state(state)
        assert head + list(fresh) == expected, k


@pytest.mark.parametrize("num_threads", [0, 4])
def test_set_state_moves_a_running_iterator_backwards_and_forwards(num_threads):
    ds = MapDataset.range(100).to_iter_dataset(ReadOptions(num_threads=num_threads))
    it = iter(ds)
    for _ in range(30):
        next(it)
    it.set_state({"next_index": 10})
    assert [next(it) for _ in range(3)] == [10, 11, 12]
    it.set_state({"next_index": 90})
    assert list(it) == list(range(90, 100))
    it.set_state({"next_index": 0})
    assert list(it) == list(range(100))


@pytest.mark.parametrize(
    "state",
    [
        {"next_index": -1},
        {"next_index": 101},
        {"next_index": 1.0},
        {"next_index": "3"},
        {"next_index": True},
        {"next_index": None},
        {},
        {"next_index": 1, "epoch": 0},
        {"position": 0, "parents": [{"next_index": 0}]},
        [0],
        None,
        3,
    ],
)
def test_set_state_rejects_states_of_another_shape(state):
    it = iter(MapDataset.range(100).to_iter_dataset(ReadOptions(num_threads=0)))
    with pytest.raises((ValueError, TypeError)):
        it.set_state(state)


def test_next_index_at_the_end_is_accepted():
    it = iter(MapDataset.range(100).to_iter_dataset(ReadOptions(num_threads=4)))
    it.set_state({"next_index": 100})
    assert list(it) == []


# -- start_prefetch ------------------------------------------------------------------------


def test_start_prefetch_reads_ahead_without_consuming():
    lock = threading.Lock()
    seen: list[int] = []

    def record(x):
        with lock:
            seen.append(x)
        return x

    buffer_size = 10
    ds = MapDataset.range(100).map(record)
    ds = ds.to_iter_dataset(ReadOptions(num_threads=4, prefetch_buffer_size=buffer_size))
    it = iter(ds)
    it.start_prefetch()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)
    assert seen, "start_prefetch() started no reading"
    time.sleep(0.1)
    assert without_fingerprint(it.get_state()) == {"next_index": 0}
    with lock:
        assert len(seen) <= buffer_size, "read ahead beyond prefetch_buffer_size"
    assert next(it) == 0
    assert without_fingerprint(it.get_state()) == {"next_index": 1}
    assert list(it) == list(range(1, 100))


def test_start_prefetch_and_close_reach_through_a_pipeline():
    from grain_dataset import IterDataset

    before = reader_threads()
    ds = IterDataset.mix([threaded(4), threaded(4).filter(lambda x: x % 2)]).map(str).batch(2)
    it = iter(ds)
    it.start_prefetch()
    fresh_state = iter(ds).get_state()
    assert it.get_state() == fresh_state
    started = reader_threads() - before
    assert len(started) >= 2, "start_prefetch did not reach both components"
    assert next(it).tolist() == ["0", "1"]
    it.close()
    assert not still_alive(started)


def test_start_prefetch_without_threads_changes_nothing():
    before = reader_threads()
    it = iter(MapDataset.range(5).to_iter_dataset(ReadOptions(num_threads=0)))
    it.start_prefetch()
    assert without_fingerprint(it.get_state()) == {"next_index": 0}
    assert list(it) == [0, 1, 2, 3, 4]
    assert not reader_threads() - before


# -- errors --------------------------------------------------------------------------------


class BoomError(Exception):
    pass


def explode_at(k: int):
    def explode(x):
        if x == k:
            raise BoomError(f"element {x}")
        return x * 10

    return explode


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("k", [0, 37, 59])
def test_map_error_is_raised_at_its_position_with_its_own_type_and_traceback(num_threads, k):
    ds = MapDataset.range(60).map(explode_at(k))
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads, prefetch_buffer_size=16)))
    delivered, error = read_until_error(it)
    assert delivered == [x * 10 for x in range(k)]
    assert type(error) is BoomError
    assert str(error) == f"element {k}"
    assert "explode" in [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    notes = getattr(error, "__notes__", [])
    assert any("explode" in note for note in notes), notes
    # The iterator stays at the failing element: it is read again.
    assert without_fingerprint(it.get_state()) == {"next_index": k}
    with pytest.raises(BoomError):
        next(it)
    assert without_fingerprint(it.get_state()) == {"next_index": k}
    # Stepping over it by state continues right after it.
    it.set_state({"next_index": k + 1})
    assert list(it) == [x * 10 for x in range(k + 1, 60)]
    it.close()


@pytest.mark.parametrize("num_threads", THREADS)
def test_filter_error_is_raised_at_its_position(num_threads):
    def picky(x):
        if x == 21:
            raise BoomError("picky")
        return x % 2 == 0

    ds = MapDataset.range(40).filter(picky)
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads)))
    delivered, error = read_until_error(it)
    assert delivered == list(range(0, 21, 2))
    assert type(error) is BoomError
    assert any("picky" in note for note in error.__notes__)
    assert without_fingerprint(it.get_state()) == {"next_index": 21}
    it.close()


class FailingSource:
    def __len__(self):
        return 30

    def __getitem__(self, index):
        if index == 12:
            raise OSError("disk")
        return index


@pytest.mark.parametrize("num_threads", THREADS)
def test_source_error_is_raised_at_its_position(num_threads):
    it = iter(MapDataset.source(FailingSource()).to_iter_dataset(ReadOptions(num_threads)))
    delivered, error = read_until_error(it)
    assert delivered == list(range(12))
    assert type(error) is OSError
    assert str(error) == "disk"
    assert without_fingerprint(it.get_state()) == {"next_index": 12}
    it.close()


@pytest.mark.parametrize("num_threads", THREADS)
def test_an_error_is_raised_once_per_failure_and_the_element_read_again(num_threads):
    # A transient failure (e.g. a flaky read) on the first attempt at element 37:
    # the caller must see the error, at element 37, exactly once, and then get
    # element 37 and the rest when it asks again.
    lock = threading.Lock()
    calls: collections.Counter = collections.Counter()

    def flaky(x):
        with lock:
            calls[x] += 1
            first = calls[x] == 1
        if x == 37 and first:
            raise BoomError("transient")
        return x

    ds = MapDataset.range(60).map(flaky)
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads, prefetch_buffer_size=16)))
    values, errors = drain(it)
    assert values == list(range(60))
    assert [str(e) for e in errors] == ["transient"], "the failure was not reported"
    it.close()


# -- threads ---------------------------------------------------------------------------------


def slow(x):
    time.sleep(0.0005)
    return x


def threaded(num_threads: int = 16):
    return MapDataset.range(100_000).map(slow).to_iter_dataset(ReadOptions(num_threads, 64))


@pytest.mark.parametrize("num_threads", [1, 4, 16])
def test_close_stops_the_reader_threads(num_threads):
    before = reader_threads()
    it = iter(threaded(num_threads))
    assert next(it) == 0
    started = reader_threads() - before
    assert started, "the iterator started no reader thread"
    assert len(started) <= num_threads
    it.close()
    assert not still_alive(started)
    it.close()  # idempotent


def test_dropping_the_iterator_stops_the_reader_threads():
    before = reader_threads()
    it = iter(threaded())
    for _ in range(20):
        next(it)
    started = reader_threads() - before
    assert started
    del it
    gc.collect()
    assert not still_alive(started)


def test_breaking_out_of_a_for_loop_stops_the_reader_threads():
    before = reader_threads()
    started = set()
    for x in threaded():
        started |= reader_threads() - before
        if x == 30:
            break
    assert started
    gc.collect()
    assert not still_alive(started)


def test_dropping_a_pipeline_iterator_stops_the_threads_of_every_component():
    from grain_dataset import IterDataset

    before = reader_threads()
    ds = IterDataset.mix([threaded(4), threaded(4).map(lambda x: -x)]).batch(4)
    it = iter(ds)
    assert [b.tolist() for b in (next(it), next(it))] == [[0, 0, 1, -1], [2, -2, 3, -3]]
    started = reader_threads() - before
    assert len(started) >= 2
    del it
    gc.collect()
    assert not still_alive(started)


def test_a_with_block_closes_the_iterator():
    before = reader_threads()
    with iter(threaded()) as it:
        next(it)
        started = reader_threads() - before
    assert started
    assert not still_alive(started)


def test_an_error_does_not_leak_threads():
    before = reader_threads()
    ds = MapDataset.range(10_000).map(explode_at(500))
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=8)))
    with pytest.raises(BoomError):
        for _ in it:
            pass
    started = reader_threads() - before
    it.close()
    assert not still_alive(started)


def test_closing_before_reading_is_fine():
    it = iter(threaded())
    it.close()
    it.close()


def test_interpreter_exit_mid_epoch_is_silent():
    code = textwrap.dedent(
        """
        import time
        import grain_dataset as gd

        def slow(x):
            time.sleep(0.001)
            return x

        ds = gd.MapDataset.range(1_000_000).map(slow)
        it = iter(ds.to_iter_dataset(gd.ReadOptions(num_threads=16, prefetch_buffer_size=500)))
        for _ in range(50):
            next(it)
        kept = iter(ds.to_iter_dataset(gd.ReadOptions(num_threads=16)))
        kept.start_prefetch()
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.stderr == ""
    assert result.returncode == 0
    assert result.stdout == "ok\n"


# -- time to the first element -------------------------------------------------------------


def _counting(calls, seconds=0.0, size=None):
    def f(x):
        calls.append(x)
        if seconds:
            time.sleep(seconds)
        return np.zeros(size, np.uint8) if size else x

    return f


@pytest.mark.timeout(30)
@pytest.mark.parametrize("num_threads", [0, 16])
def test_the_first_batch_costs_one_batch(monkeypatch, num_threads):
    from grain_dataset._threads import _read_ahead

    chunks, read_chunk = [], _read_ahead._read_chunk

    def logged(dataset, start, stop, *args, **kwargs):
        chunks.append((start, stop))
        return read_chunk(dataset, start, stop, *args, **kwargs)

    monkeypatch.setattr(_read_ahead, "_read_chunk", logged)
    calls = []
    ds = MapDataset.range(10_000).map(_counting(calls, 0.002)).batch(32)
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads)))
    first = next(it)
    assert first.tolist() == list(range(32))
    # The first chunk is the first batch alone; with threads, batches that wait (I/O)
    # are read beside it, one per reader, each a chunk of its own.
    assert chunks[0] == (0, 1)
    assert all(stop - start == 1 for start, stop in chunks)
    if not num_threads:
        time.sleep(0.1)  # nothing reads ahead without threads
        assert len(calls) == 32
    it.close()


@pytest.mark.timeout(30)
def test_cheap_elements_still_read_in_growing_chunks():
    calls = []
    it = iter(MapDataset.range(100_000).map(_counting(calls)).to_iter_dataset(ReadOptions(0)))
    assert next(it) == 0
    assert len(calls) == 1
    for _ in range(5000):
        next(it)
    assert it._chunk >= 256  # vectorized reads once the consumer keeps up


@pytest.mark.timeout(30)
@pytest.mark.parametrize("num_threads", [0, 4])
def test_large_elements_are_read_a_few_at_a_time(num_threads):
    calls = []
    big = 8 << 20  # 8 MB each: at most 64 MB in flight, one per chunk
    ds = MapDataset.range(200).map(_counting(calls, size=big))
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=num_threads, prefetch_buffer_size=500)))
    for _ in range(20):
        next(it)
    time.sleep(0.2)
    assert len(calls) <= 20 + (64 << 20) // big + 2
    it.close()


@pytest.mark.timeout(90)
def test_large_elements_that_wait_are_read_by_as_many_threads_as_pay():
    # 24 MB each: the 64 MB bound alone would allow two in flight; each read waits
    # 30 ms (as on a file or a decoder that releases the GIL), so more readers pay.
    big, lock, running, most = 24 << 20, threading.Lock(), [0], [0]

    def slow(x):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.03)
        with lock:
            running[0] -= 1
        return np.zeros(big, np.uint8)

    ds = MapDataset.range(1000).map(slow)
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=8, prefetch_buffer_size=500)))
    # A trial that a loaded machine spoils is tried again some seconds later.
    for _ in it:
        if most[0] >= 4:
            break
    assert most[0] >= 4  # the tuner widened past the bytes bound ...
    assert most[0] <= 8  # ... and never past num_threads
    it.close()


# -- readers that do not wait for the consumer, and a second one at the start ---------------


_BLOCK = bytes(1 << 20)


def _spans(log):
    """A map that records each call's thread and start time in `log` as it starts, and
    its end time (the last item, None until then) as it ends."""

    def f(x, seconds, python):
        began = time.perf_counter()
        entry = [x, threading.get_ident(), began, None]
        log.append(entry)
        while time.perf_counter() - began < seconds:
            if python:  # holds the GIL throughout, as pure-Python work does
                sum(range(1000))
            else:  # computes with the GIL released, as image decoding does
                hashlib.sha256(_BLOCK).digest()
        entry[3] = time.perf_counter()
        return x

    return f


def _first_chunk_overlapped(python: bool) -> bool:
    """Whether another element was read while the (costly) first one was."""
    log = []
    f = _spans(log)
    # 0.3 s: a loaded machine (the free-threaded leg's parallel suite) may wake the
    # consumer from its 5 ms wait tens of milliseconds late, and the second reader then
    # starts late; it must still begin while the first element runs.
    ds = MapDataset.range(50).map(lambda x: f(x, 0.3 if x == 0 else 0.01, python))
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=4)))
    _first_chunk_overlapped.tuner = it._tuner  # for the message of a failing assertion
    assert next(it) == 0
    it.close()
    _, first_thread, _, first_end = next(entry for entry in log if entry[0] == 0)
    # Starts are logged as they happen: a call begun beside the first is in the log by
    # the time the first returns, however late a loaded machine lets it end.
    return any(t != first_thread and began < first_end for x, t, began, _ in list(log) if x)


@pytest.mark.skipif(
    len(getattr(__import__("os"), "sched_getaffinity", lambda _: [0, 1])(0)) < 2,
    reason="a second reader at the start needs two usable cores",
)
def test_a_costly_first_element_computed_without_the_gil_gets_a_second_reader_at_once(
    monkeypatch,
):
    from grain_dataset._threads import _read_ahead

    # The probe's thresholds are timings, which a loaded machine (a CI run beside
    # another test process) upsets, always toward leaving the choice to the tuner: here
    # they are opened, so the mechanism is what is checked; the tests below check that
    # Python work and waiting are told apart with the real thresholds.
    monkeypatch.setattr(_read_ahead, "_GIL_FREE_LATENESS_S", 1.0)
    monkeypatch.setattr(_read_ahead, "_COMPUTING_SHARE", 0.0)
    overlapped = _first_chunk_overlapped(python=False)
    tuner = _first_chunk_overlapped.tuner
    assert overlapped, (tuner._cores, tuner._max_width, tuner.width, _read_ahead._usable_cores())


@pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="without a GIL, Python work is what a second reader runs beside",
)
def test_a_costly_first_element_in_python_is_read_alone():
    # Two readers would share the GIL and make the first element wait for the second.
    assert not any(_first_chunk_overlapped(python=True) for _ in range(3))


def test_a_costly_first_element_that_waits_gets_every_reader_allowed_beside_it():
    # A reader that waits (I/O, here a sleep) uses no core, and neither would the others:
    # they start while the first waits, not a window of chunks later.
    log = []
    ds = MapDataset.range(50).map(lambda x: (time.sleep(0.06 if x == 0 else 0.001), x)[1])
    it = iter(ds.map(lambda x: log.append(x) or x).to_iter_dataset(ReadOptions(num_threads=4)))
    assert next(it) == 0
    assert it._tuner.width == 4
    assert 1 in log  # read beside the first element
    it.close()


def test_a_costly_first_element_that_waits_keeps_one_reader_where_one_thread_is_allowed():
    log = []
    ds = MapDataset.range(50).map(lambda x: (time.sleep(0.06 if x == 0 else 0.001), x)[1])
    it = iter(ds.map(lambda x: log.append(x) or x).to_iter_dataset(ReadOptions(num_threads=1)))
    assert next(it) == 0
    assert log == [0]  # nothing read beside the first element
    it.close()


def test_readers_start_their_next_chunk_without_waiting_for_the_consumer():
    from grain_dataset._threads._read_ahead import _QUEUED_PER_READER

    log = []
    f = _spans(log)
    # Short chunks (5-10 ms) that keep their reader computing.
    ds = MapDataset.range(1000).map(lambda x: f(x, 0.005, python=False))
    it = iter(ds.to_iter_dataset(ReadOptions(num_threads=1)))
    it._tuner._fresh = False  # one reader throughout: what is queued is what is checked
    it._tuner.record = lambda *args, **kwargs: None
    for x in range(20):  # the chunks prove short
        assert next(it) == x
    assert len(it._pending) == _QUEUED_PER_READER
    time.sleep(0.3)  # the consumer is away: the reader goes on through its queue
    assert all(future.done() for _, _, future, _ in it._pending)
    read = len(log)
    assert [next(it) for _ in range(read - 20)] == list(range(20, read))
    it.close()


def test_the_pool_runs_at_most_its_size_once_resized():
    from grain_dataset._threads._daemon_pool import DaemonPool

    lock, running, peak = threading.Lock(), [0], []

    def task(seconds):
        with lock:
            running[0] += 1
            peak.append(running[0])
        time.sleep(seconds)
        with lock:
            running[0] -= 1

    before = {t for t in threading.enumerate() if t.name == "pool-test"}
    pool = DaemonPool(8, "pool-test")
    pool.resize(4)
    assert pool.size == 4
    for future in [pool.submit(task, 0.05, busy=4) for _ in range(8)]:
        future.result(10)
    assert max(peak) == 4
    pool.resize(1)
    assert pool.size == 1
    peak.clear()
    for future in [pool.submit(task, 0.01, busy=1) for _ in range(6)]:
        future.result(10)
    assert max(peak) == 1  # the three told to go took their exit before these
    pool.resize(20)
    assert pool.size == 8  # never more than max_threads
    pool.shutdown()
    assert pool.size == 0
    started = {t for t in threading.enumerate() if t.name == "pool-test"} - before
    assert not still_alive(started)


@pytest.mark.skipif(not hasattr(time, "pthread_getcpuclockid"), reason="no per-thread clocks")
def test_the_pools_cpu_clock_counts_its_threads_and_not_the_others():
    from grain_dataset._threads._daemon_pool import DaemonPool

    def compute(seconds):
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            hashlib.sha256(_BLOCK).digest()

    pool = DaemonPool(1, "clock-test")
    pool.submit(lambda: None).result(10)  # the thread is started
    clock = pool.cpu_clock()
    assert clock is not None
    before = clock()
    compute(0.1)  # this thread computes: the pool's clock stands still
    idle = clock() - before
    before = clock()
    pool.submit(compute, 0.4).result(10)
    busy = clock() - before
    pool.shutdown()
    assert idle < 0.02
    assert busy > 0.05  # a loaded machine may give the thread a small part of a core


def _probed(monkeypatch, late_sleeps):
    """The start-up probe over a costly first element that leaves the GIL free, with the
    first `late_sleeps` of its hand-offs (time.sleep(0)) returning late, as they do
    where the reader holds the GIL: (whether it widened, the tuner's gil_free_seen).

    A late hand-off moves the clock a second on instead of sleeping, and lateness
    counts from half a second: a loaded machine (the free-threaded leg's parallel
    suite) gives the consumer the GIL back tens of milliseconds late, never that late.
    """
    from grain_dataset._threads import _read_ahead

    monkeypatch.setattr(_read_ahead, "_GIL_FREE_LATENESS_S", 0.5)
    monkeypatch.setattr(_read_ahead, "_COMPUTING_SHARE", 0.0)  # the same: not timing here
    real_sleep, real_clock, offset = time.sleep, time.perf_counter, [0.0]

    def sleep(seconds):
        main = threading.current_thread() is threading.main_thread()
        if seconds == 0 and main and offset[0] < late_sleeps:
            offset[0] += 1.0
        real_sleep(seconds)

    def first_costly(x):
        began = time.monotonic()  # not perf_counter, which the late hand-offs move
        while time.monotonic() - began < (0.3 if x == 0 else 0.001):
            hashlib.sha256(_BLOCK).digest()
        return x

    it = iter(MapDataset.range(20).map(first_costly).to_iter_dataset(ReadOptions(num_threads=2)))
    tuner = it._tuner
    tuner._cores = 2  # the probe's rules are checked, on any machine
    widened, widen = [], tuner.widen_at_start
    tuner.widen_at_start = lambda waiting=False: widened.append(widen(waiting)) or widened[-1]
    monkeypatch.setattr(_read_ahead.time, "sleep", sleep)
    monkeypatch.setattr(_read_ahead.time, "perf_counter", lambda: real_clock() + offset[0])
    try:
        assert next(it) == 0
    finally:
        monkeypatch.setattr(_read_ahead.time, "perf_counter", real_clock)
        monkeypatch.setattr(_read_ahead.time, "sleep", real_sleep)
    it.close()
    return widened == [True], tuner.gil_free_seen


@pytest.mark.parametrize(
    ("late_sleeps", "widened", "seen"),
    [(0, True, False), (1, False, True), (2, False, False), (3, False, False)],
)
def test_the_start_up_probe_widens_if_no_hand_off_is_late_and_tells_the_tuner_of_one(
    monkeypatch, late_sleeps, widened, seen
):
    assert _probed(monkeypatch, late_sleeps) == (widened, seen)
