"""The read-ahead's width tuner: more concurrent chunks only while it pays.

Driven with a fake clock, so each decision is checked exactly and no timing of
this machine enters the test. A window is fed as the iterator feeds it: the
chunks begun before a width change first (they do not count), then the chunks
of the window, each with the consumer's wait and the readers' CPU time.
"""

import pytest

from grain_dataset._threads import _read_ahead


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(_read_ahead.time, "perf_counter", fake)
    return fake


def run_window(tuner, clock, rate, starved, busy=0.1, seconds=0.05, heavy=False):
    """Feeds one window read at `rate` positions/s; `busy`: cores the readers kept busy.

    starved: the consumer waited for the readers most of the window. heavy: one
    costly element to a chunk (a batch of decoded images, two chunks per reader
    to a window), else cheap elements (`rate` counts thousands of them).
    """
    while tuner._settling:
        clock.now += 0.001
        tuner.record(1, 0.0, 0.0)
    if heavy:
        chunks = 2 * max(1, tuner.width)
        seconds = 100.0 * chunks / rate  # rate / 100 elements a second: 0.2 s at 1000
        positions = 1.0
    else:
        chunks = max(_read_ahead._TUNE_CHUNKS, 2 * max(1, tuner.width))
        positions = 1000.0 * rate * seconds / chunks
    for _ in range(chunks):
        clock.now += seconds / chunks
        waited = seconds / chunks if starved else 0.0
        tuner.record(positions, waited, busy * seconds / chunks)


def waiting(width, per_thread=1000.0, top=None):
    """Elements that wait (I/O): the rate grows with the width up to `top` (inline reads one)."""
    return per_thread * min(max(width, 1), top or width or 1)


def test_width_grows_while_more_width_reads_faster(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=2)
    assert tuner.width == 1
    widths = []
    for _ in range(8):
        # Readers that wait: few cores busy, so the width may pass the core count.
        run_window(tuner, clock, waiting(tuner.width), starved=True, busy=0.1)
        widths.append(tuner.width)
    # Cheap elements: inline first, no faster than one reader; then doubling.
    assert widths[:6] == [0, 1, 2, 4, 8, 16]
    assert widths[-1] == 16


def test_elements_that_wait_a_millisecond_double_and_are_never_read_inline(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=2)
    widths = []
    for _ in range(40):
        # A thousand positions a second per reader: each waits a millisecond, using
        # little CPU; reading inline would only wait alone.
        run_window(tuner, clock, waiting(tuner.width, per_thread=1.0), starved=True, busy=0.1)
        widths.append(tuner.width)
    assert widths[:4] == [2, 4, 8, 16]
    assert set(widths[4:]) == {16}


def test_computation_bound_readers_grow_to_the_cores_and_no_further(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=4)
    widths = []
    for _ in range(20):
        width = max(tuner.width, 1)
        # Every reader keeps a core busy and the rate grows with them, up to 4 cores.
        run_window(
            tuner, clock, 1000.0 * min(width, 4), starved=True, busy=min(width, 4), heavy=True
        )
        widths.append(tuner.width)
        assert tuner.width <= 4
    assert widths[:2] == [2, 4]
    assert set(widths[2:]) == {4}  # neither more (no cores) nor inline (four cores busy)


def test_width_goes_back_when_more_width_does_not_pay(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=8)
    window = {"starved": True, "busy": 0.5, "heavy": True}
    run_window(tuner, clock, 1000.0, **window)
    assert tuner.width == 2  # costly elements: doubling is tried first
    run_window(tuner, clock, 1050.0, **window)  # +5%: not worth it
    assert tuner.width == 1
    run_window(tuner, clock, 1000.0, **window)
    assert tuner.width == 0  # the readers keep under one core busy: inline is tried
    run_window(tuner, clock, 1000.0, **window)  # no faster: threads it is
    assert tuner.width == 1
    # Doubling again soon (the first trial may have been unlucky), ...
    for _ in range(_read_ahead._TUNE_FIRST_PAUSE_WINDOWS - 2):
        run_window(tuner, clock, 1000.0, **window)
        assert tuner.width == 1
    run_window(tuner, clock, 1000.0, **window)
    assert tuner.width == 2
    run_window(tuner, clock, 1000.0, **window)  # no faster again
    assert tuner.width == 1
    # ... then neither doubling nor inline for a while.
    for _ in range(_read_ahead._TUNE_PAUSE_WINDOWS - 1):
        run_window(tuner, clock, 1000.0, **window)
        assert tuner.width == 1
    run_window(tuner, clock, 1000.0, **window)
    assert tuner.width == 2  # doubling is due again


def test_width_stays_when_the_consumer_is_not_starved(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=8)
    for _ in range(5):
        run_window(tuner, clock, 1000.0, starved=False, busy=1.0)
    assert tuner.width == 1


def test_width_never_exceeds_the_thread_count(clock):
    tuner = _read_ahead._WidthTuner(max_width=3, cores=64)
    for _ in range(10):
        run_window(tuner, clock, waiting(tuner.width), starved=True)
        assert tuner.width <= 3
    assert tuner.width == 3


def test_reading_inline_is_kept_while_it_is_faster_and_threads_are_tried_again(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=8)
    # Pure Python, cheap: one core busy whatever the width; inline is tried first.
    run_window(tuner, clock, 1000.0, starved=True, busy=1.0)
    assert tuner.width == 0
    run_window(tuner, clock, 2000.0, starved=True, busy=1.0)  # inline: twice as fast, kept
    assert tuner.width == 0
    # Threads are tried again (two: see the tuner), soon the first time, ...
    # (Windows at width 0 before the trial: the one that kept inline counts as one.)
    for waits in (_read_ahead._TUNE_FIRST_PAUSE_WINDOWS - 1, _read_ahead._TUNE_PAUSE_WINDOWS):
        for _ in range(waits):
            run_window(tuner, clock, 2000.0, starved=True, busy=1.0)
            assert tuner.width == 0
        run_window(tuner, clock, 2000.0, starved=True, busy=1.0)
        assert tuner.width == 2
        run_window(tuner, clock, 1000.0, starved=True, busy=1.0)
        assert tuner.width == 0  # ... and dropped when they are slower


def test_inline_kept_by_a_cold_start_gives_way_to_two_readers_soon(clock):
    tuner = _read_ahead._WidthTuner(max_width=2, cores=2)
    run_window(tuner, clock, 600.0, starved=True, busy=0.95)  # the first window: cold
    assert tuner.width == 0
    run_window(tuner, clock, 1000.0, starved=True, busy=0.95)  # inline "wins"
    assert tuner.width == 0
    for _ in range(_read_ahead._TUNE_FIRST_PAUSE_WINDOWS):
        run_window(tuner, clock, 1000.0, starved=True, busy=0.95)
    assert tuner.width == 2
    run_window(tuner, clock, 1900.0, starved=True, busy=1.9)  # image decoding: it pays
    assert tuner.width == 2
    for _ in range(50):
        run_window(tuner, clock, 1900.0, starved=True, busy=1.9)
        assert tuner.width == 2


def test_a_reader_seen_leaving_the_gil_free_tries_a_second_one_before_inline(clock):
    tuner = _read_ahead._WidthTuner(max_width=4, cores=2)
    tuner.gil_free_seen = True  # the start-up probe's finding (see _widen_if_costly)
    # Cheap elements, one reader computing: a second reader first, not inline ...
    run_window(tuner, clock, 1000.0, starved=True, busy=1.0)
    assert tuner.width == 2
    run_window(tuner, clock, 1000.0, starved=True, busy=1.0)  # ... which does not pay,
    assert tuner.width == 1
    run_window(tuner, clock, 1000.0, starved=True, busy=1.0)  # and inline is tried next
    assert tuner.width == 0


@pytest.mark.parametrize("heavy", [True, False])
def test_inline_is_not_tried_when_the_readers_use_several_cores(clock, heavy):
    tuner = _read_ahead._WidthTuner(max_width=2, cores=2)
    widths = []
    for _ in range(200):
        # Work that releases the GIL, on two cores: two readers read twice as fast.
        width = max(tuner.width, 1)
        run_window(tuner, clock, 1000.0 * width, True, busy=0.95 * width, heavy=heavy)
        widths.append(tuner.width)
    if not heavy:  # cheap chunks, one reader: inline is tried once, and loses
        assert widths[:2] == [0, 1]
        widths = widths[2:]
    assert widths[0] == 2
    assert set(widths) == {2}


def test_inline_is_tried_again_when_doubling_stops_paying(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=64)
    widths = []
    for _ in range(10):  # threads pay up to 8
        run_window(tuner, clock, waiting(tuner.width, top=8), starved=True)
        widths.append(tuner.width)
    assert widths[:6] == [0, 1, 2, 4, 8, 16]  # 16 tried, no faster than 8
    assert widths[-1] == 8
    for _ in range(8 * _read_ahead._TUNE_PAUSE_WINDOWS):
        run_window(tuner, clock, waiting(tuner.width, top=8), starved=True)
        widths.append(tuner.width)
    assert 0 in widths[10:]  # inline tried again once doubling had failed, and lost
    assert 16 in widths[10:]  # doubling tried again once it was due
    assert widths[-1] in (8, 16)


def test_long_chunks_decide_within_two_chunks_per_reader(clock):
    tuner = _read_ahead._WidthTuner(max_width=2, cores=2)
    # Chunks of 0.2 s each, one position each (a batch of decoded images): one chunk
    # decides for one reader,
    clock.now += 0.2
    tuner.record(1, 0.2, 0.2)
    assert tuner.width == 2
    # two chunks per reader for more.
    tuner.record(1, 0.0, 0.2)  # begun at width 1: does not count
    for _ in range(4):
        clock.now += 0.1
        tuner.record(1, 0.1, 0.19)
    assert tuner.width == 2  # twice the rate: kept
    assert tuner._trial is None


def test_the_same_measurements_give_the_same_choices(clock):
    def choices():
        tuner = _read_ahead._WidthTuner(max_width=16, cores=4)
        widths = []
        for step in range(300):
            width = max(tuner.width, 1)
            run_window(tuner, clock, 900.0 * min(width, 3) + step % 7, True, min(width, 3))
            widths.append(tuner.width)
        return widths

    first = choices()
    assert first == choices()
    assert first[-1] == 4  # 4 reads no faster than 3 would, but the cores allow it


def test_usable_cores_is_positive():
    assert _read_ahead._usable_cores() >= 1


@pytest.mark.parametrize("count", [1, 2, 64])
def test_a_workers_readers_count_on_its_share_of_the_cores(count):
    from grain_dataset import MapDataset, ReadOptions
    from grain_dataset.extension import iter_worker_slice

    ds = MapDataset.range(100).to_iter_dataset(ReadOptions(num_threads=4))
    it = iter_worker_slice(ds, 0, count)
    assert it._tuner._cores == max(1, _read_ahead._usable_cores() // count)
    assert list(it) == list(range(0, 100, count))


def test_one_slow_window_does_not_start_a_trial_of_reading_inline(clock):
    tuner = _read_ahead._WidthTuner(max_width=2, cores=2)
    for _ in range(6):  # two readers, two cores busy
        width = max(tuner.width, 1)
        run_window(tuner, clock, 1000.0 * width, starved=True, busy=0.95 * width)
    assert tuner.width == 2
    run_window(tuner, clock, 500.0, starved=True, busy=0.5)  # a hiccup: a collection, say
    assert tuner.width == 2  # the average of the width's windows still shows two cores busy


def test_a_trial_must_beat_the_widths_average_not_only_its_last_window(clock):
    tuner = _read_ahead._WidthTuner(max_width=2, cores=2)
    for _ in range(6):  # one reader keeps up at 1000/s: no reason to change
        run_window(tuner, clock, 1000.0, starved=False, busy=1.0, heavy=True)
    run_window(tuner, clock, 500.0, starved=True, busy=1.0, heavy=True)  # one slow window
    assert tuner.width == 2  # a second reader is tried ...
    run_window(tuner, clock, 900.0, starved=True, busy=1.0, heavy=True)
    assert tuner.width == 1  # ... and loses: 900 beats the slow window, not the average


# -- a second reader at the start, for a costly first chunk ------------------------------


@pytest.mark.parametrize(
    ("max_width", "cores", "width"), [(16, 2, 2), (2, 64, 2), (1, 64, 1), (16, 1, 1), (16, 8, 8)]
)
def test_widening_at_the_start_goes_to_the_cores_and_needs_two(max_width, cores, width):
    # Readers that compute, leaving the GIL free: as many as there are cores for them.
    widens = width > 1
    tuner = _read_ahead._WidthTuner(max_width=max_width, cores=cores)
    assert tuner.at_start is (max_width > 1)
    assert tuner.widen_at_start() is widens
    assert tuner.width == width
    assert tuner.at_start is (max_width > 1 and not widens)  # once only
    assert tuner.widen_at_start() is False


@pytest.mark.parametrize(("max_width", "cores"), [(16, 2), (8, 1), (1, 64)])
def test_readers_that_wait_get_every_thread_allowed_at_the_start(max_width, cores):
    # Threads that wait (I/O) use no core: the cores do not bound them.
    tuner = _read_ahead._WidthTuner(max_width=max_width, cores=cores)
    assert tuner.widen_at_start(waiting=True) is (max_width > 1)
    assert tuner.width == max_width
    assert not tuner.at_start
    assert tuner.widen_at_start(waiting=True) is False


def test_widening_at_the_start_only_before_the_first_window(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=8)
    run_window(tuner, clock, 1000.0, starved=False, busy=1.0, heavy=True)
    assert tuner.width == 1
    assert not tuner.at_start
    assert tuner.widen_at_start() is False


def test_the_chunks_in_flight_at_the_widening_do_not_count_for_the_new_width(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=8)
    tuner.in_flight = 1
    assert tuner.widen_at_start()
    assert tuner._settling == 1
    tuner.record(1, 0.0, 0.1)  # the first chunk, begun alone
    assert tuner._settling == 0
    assert tuner._chunks == 0


def test_a_width_change_skips_every_chunk_still_in_flight(clock):
    tuner = _read_ahead._WidthTuner(max_width=16, cores=8)
    run_window(tuner, clock, 1000.0, starved=True, busy=0.95, heavy=True)
    assert tuner.width == 2
    tuner.in_flight = 2 * _read_ahead._QUEUED_PER_READER  # two readers, their queues full
    run_window(tuner, clock, 2000.0, starved=True, busy=1.9, heavy=True)
    assert tuner.width == 4  # two kept, and four tried at once
    assert tuner._settling == 2 * _read_ahead._QUEUED_PER_READER
