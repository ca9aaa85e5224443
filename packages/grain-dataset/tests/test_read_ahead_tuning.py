"""The read-ahead's width tuner: more concurrent chunks only while it pays.

Driven with a fake clock, so each decision is checked exactly and no timing of
this machine enters the test.
"""

import pytest

from grain_dataset import _read_ahead


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


def run_window(tuner, clock, rate, starved):
    """Feeds one window of chunks read at `rate` positions/s; starved: the consumer waited."""
    chunks = _read_ahead._TUNE_CHUNKS
    seconds = 0.05
    for _ in range(chunks):
        clock.now += seconds / chunks
        waited = seconds / chunks if starved else 0.0
        tuner.record(int(rate * seconds / chunks), waited)


def test_width_grows_while_more_width_reads_faster(clock):
    tuner = _read_ahead._WidthTuner(max_width=16)
    assert tuner.width == 1
    widths = []
    for _ in range(10):
        # Waiting elements: the rate is proportional to the width (inline reads one).
        run_window(tuner, clock, 1000.0 * max(tuner.width, 1), starved=True)
        widths.append(tuner.width)
    assert 16 in widths
    grown = [width for width in widths if width]  # 0: reading inline, tried at the top
    assert grown == sorted(grown)
    assert widths[-1] in (0, 16)


def test_width_goes_back_when_more_width_does_not_pay(clock):
    tuner = _read_ahead._WidthTuner(max_width=16)
    run_window(tuner, clock, 1000.0, starved=True)
    assert tuner.width == 0  # reading inline is tried first
    run_window(tuner, clock, 1000.0, starved=True)  # no faster: threads it is
    assert tuner.width == 1
    run_window(tuner, clock, 1000.0, starved=True)
    assert tuner.width == 2  # trying more threads
    run_window(tuner, clock, 1050.0, starved=True)  # +5%: not worth it
    assert tuner.width == 1
    for _ in range(_read_ahead._TUNE_PAUSE_WINDOWS):
        run_window(tuner, clock, 1000.0, starved=True)
        assert tuner.width == 1  # paused before trying again (inline lost lately)
    run_window(tuner, clock, 1000.0, starved=True)
    assert tuner.width == 2


def test_width_stays_when_the_consumer_is_not_starved(clock):
    tuner = _read_ahead._WidthTuner(max_width=16)
    for _ in range(5):
        run_window(tuner, clock, 1000.0, starved=False)
    assert tuner.width == 1


def test_width_never_exceeds_the_thread_count(clock):
    tuner = _read_ahead._WidthTuner(max_width=3)
    for _ in range(10):
        run_window(tuner, clock, 1000.0 * tuner.width, starved=True)
        assert tuner.width <= 3
    assert tuner.width == 3


def test_reading_inline_is_kept_while_it_is_faster_and_threads_are_tried_again(clock):
    tuner = _read_ahead._WidthTuner(max_width=16)
    run_window(tuner, clock, 1000.0, starved=True)
    assert tuner.width == 0
    run_window(tuner, clock, 2000.0, starved=True)  # inline: twice as fast, kept
    assert tuner.width == 0
    for _ in range(_read_ahead._TUNE_PAUSE_WINDOWS):
        run_window(tuner, clock, 2000.0, starved=True)
        assert tuner.width == 0
    run_window(tuner, clock, 2000.0, starved=True)
    assert tuner.width == 1  # now and then a thread is tried again
    run_window(tuner, clock, 1000.0, starved=True)
    assert tuner.width == 0  # and dropped when it is slower


def test_inline_is_tried_again_when_doubling_stops_paying(clock):
    tuner = _read_ahead._WidthTuner(max_width=16)
    widths = []
    for _ in range(12):  # threads pay up to 8 (inline reads like one thread)
        run_window(tuner, clock, 1000.0 * min(max(tuner.width, 1), 8), starved=True)
        widths.append(tuner.width)
    assert widths[0] == 0  # inline first, lost
    assert 16 in widths  # 16 tried, no faster than 8
    assert widths[-1] == 8
    for _ in range(8 * _read_ahead._TUNE_PAUSE_WINDOWS):
        run_window(tuner, clock, 1000.0 * min(max(tuner.width, 1), 8), starved=True)
        widths.append(tuner.width)
    assert 0 in widths[12:]  # inline tried again once it was due, and lost again
    assert widths[-1] in (8, 16)
