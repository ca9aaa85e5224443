"""`MapDataset.to_iter_dataset`: read ahead in a thread pool, hand out in order.

The iterator walks positions 0 .. len(ds) - 1 of the MapDataset. Positions are
read in *chunks* of consecutive indices, each one `_getitems` call, so a
shuffle, a source or a batch sees many indices at once and can vectorize; the
chunk size adapts to keep one chunk near `_TARGET_CHUNK_S` of work. The first
chunk is one element, so the first element (after a start or a restore) costs
one element's work, and chunks grow only while elements are cheap; a chunk
holds at most about a megabyte of arrays and the readers a bounded number of
bytes (or one element per running reader, if more), so large elements are read
one at a time and their memory is reused. With threads, chunks run in a small
pool of daemon threads, at most `prefetch_buffer_size` elements in flight, and
are consumed strictly in order. How many chunks run at once (up to
`num_threads`) is tuned while reading (`_WidthTuner`), from what it measures on
the machine that runs it: waiting elements (I/O) and elements that release the
GIL (image decoding) get as many threads as keep paying, computation no more
than the cores the process may use, and pure-Python elements, which only queue
on the GIL, few or none. Each reader has a chunk queued behind the one it reads
(`_QUEUED_PER_READER`), so a reader that ends a chunk starts the next without
waiting for the consumer, where chunks are short (under `_SHORT_CHUNK_S`: the
hand-off is then a noticeable part of a chunk; longer ones, batches, would only
hold a batch more of memory per reader); the pool is resized to the width, so
no more than the width run once the queue has turned over. An early chunk still
running after `_START_WIDEN_S` (or half the time the chunk before says it should
take) is probed: a reader that computes while the GIL is free gets readers up to
the cores at once, one that waits (I/O) every thread allowed
(`_WidthTuner.widen_at_start`). A batch stage with the default batch_fn takes its
batches whole (`_take_batch`): chunks then end at the batches' bounds, a batch's
chunks are spread over the readers, and each reader copies its chunk's large arrays
into the batch's one allocation as they come (`SharedRows`).

In a worker's pipeline (mp_prefetch, multithread_prefetch: the iterator was
created by `iter_worker_slice`, or by a stage of such a pipeline), the iterator
reads only the worker's share of the positions, ``source[index::count]``, or
with `sequential` the index-th of `count` contiguous slices (sizes differing by
at most one, the larger first); it finds the slice in its iterator context
(see grain_dataset._core._worker_slice). Other pipelines of the same process or
thread read everything.

State: ``{"next_index": i}``, the position after the last element returned.
Read-ahead never shows in it, so a state means the same thing whatever the
thread count, and restoring it re-reads from i.

Errors: if a chunk fails, the worker re-reads it element by element, so the
elements before the failing one are still delivered and the exception (its
original type, traceback and a note naming the stage) is raised exactly at the
failing position; the iterator then stays there.

Threads hold no reference to the iterator: dropping or closing it (or the
garbage collector) stops them, and being daemons they never delay exit.
A thread stuck in a transformation that never returns cannot be stopped: it
keeps only the MapDataset it reads (not the iterator, nor this stage), and a
`next()` waiting for its chunk ends when close() is called from another
thread (the closed-iterator ValueError, within `POLL_S`).
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from grain_dataset._common._errors import OutOfRangeError
from grain_dataset._common._options import ReadOptions
from grain_dataset._common._row_stack import RowStack, SharedRows, batch_of, read_stacked
from grain_dataset._common._tree import stack
from grain_dataset._core._base import DatasetIterator, IterDataset, MapDataset, register
from grain_dataset._core._stage import upstream
from grain_dataset._core._state import check_state
from grain_dataset._core._worker_slice import slice_positions
from grain_dataset._runtime._filter_check import FilterRatioCheck, options_of
from grain_dataset._runtime._guard import POLL_S, closed_error
from grain_dataset._threads._daemon_pool import DaemonPool

_TARGET_CHUNK_S = 0.005
# The first chunk is one element, so the first element costs one element (a batch of
# decoded images is ready as soon as it is computed); chunks grow (x4 per chunk, up to
# _TARGET_CHUNK_S of work) while elements are cheap.
_FIRST_CHUNK = 1
_MAX_CHUNK = 1024
# Bytes bounds, from the size of the chunk's first element: a chunk holds at most
# _MAX_CHUNK_BYTES (large batches stay one per chunk, and the allocator can reuse the
# memory of the one before), the readers at most _MAX_IN_FLIGHT_BYTES.
_MAX_CHUNK_BYTES = 1 << 20
_MAX_IN_FLIGHT_BYTES = 64 << 20
# Dropped positions in a row, within one chunk, after which the filter check runs at once.
_JUDGE_RUN = 64
_MAX_CHUNK_WALL_S = 0.01
# A tuning window: at least two chunks per reader (one with one reader) and
# _TUNE_WINDOW_S, and _TUNE_CHUNKS chunks unless it already lasted _TUNE_LONG_WINDOW_S.
_TUNE_CHUNKS = 8
_TUNE_WINDOW_S = 0.01
_TUNE_LONG_WINDOW_S = 0.1
_TUNE_PAUSE_WINDOWS = 32
_TUNE_FIRST_PAUSE_WINDOWS = 4
# The readers' time per element (their threads' wall time) from which elements that use
# little CPU count as waiting (I/O), not as cheap: reading them inline is not tried.
_WAITING_S = 0.0002
# Elements that cost less CPU than 1/_CHEAP_CHUNK of a chunk's target count as cheap.
_CHEAP_CHUNK = 2
# Chunks queued per reader where chunks are short (their wall time under _SHORT_CHUNK_S):
# one running and one waiting, so that a reader that ends a chunk starts the next at
# once instead of waiting for the consumer to ask for it.
_QUEUED_PER_READER = 2
_SHORT_CHUNK_S = 0.02
# A batch taken whole (`_take_batch`) is read in at least _PARTS_PER_READER chunks per
# reader, each of the tuned size or more, but of at most _MAX_PART_S of a reader's time.
_PARTS_PER_READER = 2
_MAX_PART_S = 0.02
# Calls in a row that find no whole batch (filtered positions, every batch, or elements
# without rows to stack ahead) after which `_take_batch` stops aligning chunks to batches.
_BATCH_MISSES = 8
# A first chunk still running after this long is costly: a second reader starts at once
# (see `_WidthTuner.widen_at_start`), unless the readers hold the GIL.
_START_WIDEN_S = _TARGET_CHUNK_S
# The shortest wait before the probe: chunks of cheap elements (pure Python) end sooner.
_MIN_PROBE_S = 0.001
# How long the consumer may take to get the GIL back after each of _GIL_PROBES hand-offs
# (time.sleep(0)) and still count it as free: a reader running Python keeps it for the
# interpreter's switch interval (5 ms), a reader in C code (decoding) lets the consumer
# in within a fraction of a millisecond. All of them back at once: a second reader now;
# one late: the tuner is told (`_WidthTuner.gil_free_seen`); two, and the reader holds it.
_GIL_FREE_LATENESS_S = 0.001
_GIL_PROBES = 3
# The CPU the reader must have used during that wait (and during the hand-offs), as a
# share of it, to count as computing: a reader that waits (I/O, a sleep) uses next to
# none and is left to the tuner, which first tries such cheap elements in the consumer's
# own thread. A quarter, not more: on a machine busy with other work (the readers of an
# iterator just closed finish their chunks) a computing reader gets a part of a core.
_COMPUTING_SHARE = 0.25


@register("to_iter_dataset")
class PrefetchIterDataset(IterDataset[Any]):
    """An IterDataset over one epoch of a MapDataset, read ahead by threads."""

    def _fingerprint_token(self) -> str | None:
        return "to_iter"

    def __init__(
        self,
        parent: MapDataset[Any],
        read_options: ReadOptions | None = None,
        allow_nones: bool = False,
    ):
        if not isinstance(parent, MapDataset):
            raise TypeError(f"`parent` must be a MapDataset, got {type(parent).__name__}.")
        super().__init__(parent)
        if read_options is None:
            read_options = ReadOptions()
        if not isinstance(read_options, ReadOptions):
            raise TypeError(
                f"`read_options` must be a grain.ReadOptions or None, got {read_options!r}."
            )
        if not isinstance(allow_nones, bool):
            raise TypeError(f"`allow_nones` must be a bool, got {allow_nones!r}.")
        self._read_options = read_options
        self._allow_nones = allow_nones

    def __iter__(self) -> DatasetIterator[Any]:
        return _PrefetchIterator(self)

    def __repr__(self) -> str:
        return f"PrefetchIterDataset(read_options={self._read_options!r})"


def _reads_batched_source(dataset: MapDataset[Any]) -> bool:
    """Whether a source under `dataset` reads many records at once (`__getitems__`)."""
    return any(stage._batched for stage in upstream(dataset, within=MapDataset))


def _read_chunk(
    dataset: MapDataset[Any],
    start: int,
    stop: int,
    one_by_one: bool = False,
    rows: RowStack | None = None,
) -> tuple[list[Any], Any, float, float]:
    """Elements [start, stop) of `dataset`, the error that stopped them, CPU and wall time.

    With `rows` (a part of a batch that a batch stage takes whole, see
    `_take_batch`) each element's large arrays are copied into the batch's rows
    as they come, read a megabyte at a time (`read_stacked`), in the reader: the
    consumer's thread no longer copies every element, and the elements returned
    hold views of the rows.

    When the one vectorized read fails, the chunk is read again element by
    element to find where: the elements before the failing one are returned
    with its error. (Their functions run twice then; transforms are expected
    to be pure.) If the second read does not fail, the failure was transient:
    the first error is returned at the chunk's start, so it is reported once
    and nothing of the chunk is lost.
    """
    cpu, wall = time.thread_time(), time.perf_counter()
    if rows is None:
        values, error = _read_values(dataset, start, stop, one_by_one)
    else:
        error = read_stacked(
            rows, start, stop, lambda a, b: _read_values(dataset, a, b, one_by_one)
        )
        values = rows.elements()
    return values, error, time.thread_time() - cpu, time.perf_counter() - wall


def _read_values(
    dataset: MapDataset[Any], start: int, stop: int, one_by_one: bool
) -> tuple[list[Any], Exception | None]:
    """Elements [start, stop) and the error that stopped them (see `_read_chunk`)."""
    error: Exception | None = None
    try:
        if one_by_one and stop - start == 1:  # large elements, one per chunk: no arrays
            return [dataset._getitem(start)], None
        return dataset._getitems(np.arange(start, stop, dtype=np.int64)), None
    except Exception as first_error:
        error = first_error
    # Outside the except block: the error found below must not chain the first one.
    values = []
    for index in range(start, stop):
        try:
            values.append(dataset._getitem(index))
        except Exception as element_error:
            return values, element_error
    return [], error


def _nbytes(value: Any, depth: int = 0) -> int:
    """The bytes of an element's arrays (and bytes objects); 0 if it holds none."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, bytes | bytearray):
        return len(value)
    if depth < 4:
        if isinstance(value, dict):
            return sum(_nbytes(item, depth + 1) for item in value.values())
        if isinstance(value, list | tuple) and len(value) <= 64:
            return sum(_nbytes(item, depth + 1) for item in value)
    return 0


def _element_bytes(values: list[Any]) -> int:
    for value in values[:4]:
        if value is not None:
            return _nbytes(value)
    return 0


def _usable_cores() -> int:
    """The CPUs this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _smoothed(average: float | None, value: float) -> float:
    """A moving average of a width's windows, started by its first window."""
    return value if average is None else 0.7 * average + 0.3 * value


class _WidthTuner:
    """Chooses how many chunks are read at once: more only while it pays.

    Threads help elements that wait (files, sleeps) or release the GIL (image
    decoding, compression, most numpy), and hurt elements that are pure Python
    (they queue on the GIL and pay for every hand-off). Nothing is assumed
    about which kind a pipeline is, or about the machine: each window of chunks
    measures the read rate, whether the consumer waited for the readers
    (starved), and how many cores the readers kept busy (their CPU time over
    the wall time). While the consumer is starved the width doubles, and the
    doubling is kept if it reads at least 15% faster, else undone and not tried
    again for a while. Readers that use all the CPU their threads give them are
    limited by computation, so the width then grows no further than the cores
    this process may use; readers that leave their threads idle (waiting on
    I/O, or on each other for the GIL) may grow to `max_width`, the rate decides.
    Width 0 reads in the consumer's own thread: tried while the readers keep at
    most about one core busy (work serialized by the GIL, where every hand-off
    between threads costs more than it buys), first of all for one reader of
    cheap elements (half a chunk's CPU target or less), else when doubling
    stopped paying, and kept if it reads 15% faster; then two readers are tried
    again, soon the first time, then now and then (a doubling that lost, too).
    Decisions take a window of at least two chunks per reader (one chunk with
    one reader), so elements that cost a tenth of a second reach their width
    within a few of them. The order of elements never depends on the width.
    """

    def __init__(self, max_width: int, cores: int):
        self.width = 1
        self._max_width = max_width
        self._cores = max(1, cores)  # those this process (a worker: its share) may use
        self._window_start = time.perf_counter()
        self._positions = 0
        self._waited = 0.0
        self._cpu = 0.0
        self._chunks = 0
        # (width before, the rate to beat, its average rate and busy cores)
        self._trial: tuple[int, float, float | None, float | None] | None = None
        self._pause = 0  # windows before a width that was kept is questioned again
        self._grow_wait = 0  # windows before a doubling that did not pay is tried again
        self._inline_wait = 0  # windows before reading inline is tried again
        self._inline_kept = False  # whether reading inline has won a trial yet
        self._grow_failed = False  # whether a doubling has lost a trial yet
        self._settling = 0  # chunks still to come that began before the width changed
        self._fresh = True  # no window decided yet, nor widened at the start
        # Set by the start-up probe: a computing reader that left the GIL free part of
        # the time. One reader of cheap elements then tries a second before reading inline.
        self.gil_free_seen = False
        # Chunks in flight after the last one handed out (the iterator keeps it): those
        # began at the width before a change, and do not count for the new one.
        self.in_flight = 0
        # The read rate at the current width, averaged over its windows: a trial must
        # beat this as well as the last window, which one hiccup (a collection, a
        # page-faulting allocation) can make slow in a window of 10 ms.
        self._rate_avg: float | None = None
        self._busy_avg: float | None = None  # the same for the cores the readers kept busy

    def record(self, positions: int, waited: float, cpu: float = 0.0) -> None:
        """One chunk handed to the consumer: its positions, the consumer's wait, its CPU time."""
        now = time.perf_counter()
        if self._settling:
            # Read (or begun) at the width before: a window of the new one starts after it.
            self._settling -= 1
            self._window_start = now
            return
        self._positions += positions
        self._waited += waited
        self._cpu += cpu
        self._chunks += 1
        elapsed = now - self._window_start
        # Chunks of several readers end close together: two per reader make a fair window.
        # One reader's (or inline) chunks end one after another, so one long chunk does.
        enough = 2 * self.width if self.width > 1 else 1
        if (
            self._chunks < enough
            or elapsed < _TUNE_WINDOW_S
            or (self._chunks < _TUNE_CHUNKS and elapsed < _TUNE_LONG_WINDOW_S)
        ):
            return
        positions = self._positions
        rate = positions / elapsed
        starved = self._waited > 0.2 * elapsed
        busy = self._cpu / elapsed  # cores the readers kept busy
        # Elements that cost a small part of a chunk's target (or wait, costing no
        # CPU) are cheap: a hand-off per chunk and the GIL's convoys weigh most there.
        cheap = self._cpu < self._positions * _TARGET_CHUNK_S / _CHEAP_CHUNK
        self._window_start, self._positions, self._waited, self._cpu = now, 0, 0.0, 0.0
        self._chunks = 0
        self._fresh = False
        if self._trial is not None and not self._judge_trial(rate):
            return  # back to the width before: this window measured the other one
        self._rate_avg = _smoothed(self._rate_avg, rate)
        # One window's CPU sum swings with the chunks that happen to end in it: the
        # decisions below use the average at this width.
        busy = self._busy_avg = _smoothed(self._busy_avg, busy)
        self._grow_wait = max(0, self._grow_wait - 1)
        self._inline_wait = max(0, self._inline_wait - 1)
        if self._pause:
            self._pause -= 1
        elif self.width == 0:
            # Reading inline won: see now and then whether threads pay again. Two
            # readers, not one, since one reader can only match inline where the work
            # releases the GIL: what pays there is a second one.
            self._try(min(2, self._max_width), rate)
        elif starved:
            wider = self._wider(busy)
            # Readers that keep a quarter of their threads busy or less, on elements that
            # take them a fifth of a millisecond or more, wait (I/O): one reader inline
            # would only wait alone. (Cheaper ones may be mostly hand-offs: inline may pay.)
            waits = busy < 0.25 * self.width and self.width * elapsed >= positions * _WAITING_S
            inline = busy < 1.3 and not self._inline_wait and not waits
            if inline and self.width == 1 and cheap and not self.gil_free_seen:
                # One reader of cheap elements: reading inline is tried before a second
                # reader. Costlier elements (an image to decode) try the second reader
                # first: against one reader, inline wins or loses there by noise alone.
                # (Cost, not elements per chunk: the bytes bound makes chunks of large
                # cheap elements short.)
                self._try(0, rate)
            elif wider is not None and not self._grow_wait:
                self._try(wider, rate)
            elif inline:
                self._try(0, rate)

    @property
    def at_start(self) -> bool:
        """Whether one reader runs and nothing was decided yet: `widen_at_start` may apply."""
        return self._fresh and self.width == 1 and self._max_width > 1

    def widen_at_start(self, waiting: bool = False) -> bool:
        """More readers at once, for a first chunk that is costly and leaves the GIL free.

        The consumer has nothing to do but wait for the first chunk, so more
        readers cost it nothing; without them, elements that cost a tenth of a
        second each would take a whole window per doubling (seconds on a host with
        many cores). A reader that computes gets as many readers as this process
        may use cores, up to `max_width`; one that waits (I/O, `waiting`) gets all
        `max_width` at once, as many as the user allowed, as threads that wait use
        no core. The width is then judged like any other: doubled while that pays,
        inline tried where it may pay.
        """
        width = self._max_width if waiting else min(self._max_width, self._cores)
        if not self.at_start or width < 2:
            return False
        self._fresh = False
        self.width = width
        self._settling = max(1, self.in_flight)
        self._window_start = time.perf_counter()
        return True

    def _wider(self, busy: float) -> int | None:
        """The doubled width worth a trial, or None when there is no room for more."""
        limit = self._max_width
        if busy >= 0.75 * self.width:  # computation-bound: more threads than cores buy nothing
            limit = min(limit, max(self._cores, self.width))
        wider = min(limit, 2 * self.width)
        return wider if wider > self.width else None

    def _try(self, width: int, rate: float) -> None:
        baseline = rate if self._rate_avg is None else max(rate, self._rate_avg)
        self._trial = (self.width, baseline, self._rate_avg, self._busy_avg)
        self._settling = max(1, self.in_flight)
        self.width = width
        self._rate_avg = self._busy_avg = None

    def _judge_trial(self, rate: float) -> bool:
        """Keeps the width on trial if it read 15% faster than the one before, else goes back.

        True if kept: the window then measured the width now in use, and may decide
        the next step at once.
        """
        assert self._trial is not None
        width, old_rate, old_average, old_busy = self._trial
        self._trial = None
        tried, kept = self.width, rate >= old_rate * 1.15
        if not kept:
            self.width = width
            self._settling = max(1, self.in_flight)
            self._rate_avg, self._busy_avg = old_average, old_busy
        if tried == 0:  # reading inline
            if kept:
                # The first time soon: a window that was slow for a passing reason (a
                # cold start) may have made inline look better than it is.
                first = not self._inline_kept
                self._inline_kept = True
                self._pause = _TUNE_FIRST_PAUSE_WINDOWS if first else _TUNE_PAUSE_WINDOWS
            else:  # threads it is; inline again much later
                self._inline_wait = 4 * _TUNE_PAUSE_WINDOWS
        elif width == 0:  # a thread again, after reading inline
            if not kept:
                self._pause = _TUNE_PAUSE_WINDOWS
        elif not kept:  # a doubling that did not pay; the first may have been unlucky
            first = not self._grow_failed
            self._grow_failed = True
            self._grow_wait = _TUNE_FIRST_PAUSE_WINDOWS if first else _TUNE_PAUSE_WINDOWS
        return kept


class _PrefetchIterator(DatasetIterator[Any]):
    def __init__(self, dataset: PrefetchIterDataset):
        super().__init__()
        self._dataset = dataset
        # In a worker's pipeline: only the worker's share of the positions.
        self._source: MapDataset[Any] = slice_positions(dataset._parents[0], self._ctx.worker_slice)
        self._length = len(self._source)
        # A chunk of one element may be read with `_getitem`, unless a source promises
        # to be asked for records in batches (`__getitems__`).
        self._one_by_one = not _reads_batched_source(self._source)
        self._allow_nones = dataset._allow_nones
        options = dataset._read_options
        self._threads = options.num_threads if options.prefetch_buffer_size else 0
        self._buffer_size = options.prefetch_buffer_size
        self._tuner: _WidthTuner | None = None
        if self._threads:
            # A worker's readers share the cores with the other workers of the host.
            workers = self._ctx.worker_slice[1] if self._ctx.worker_slice else 1
            self._tuner = _WidthTuner(self._threads, max(1, _usable_cores() // workers))
        self._pool: DaemonPool | None = None
        # Chunks submitted: their positions, future and, for a part of a batch taken whole
        # (`_take_batch`), the part's rows.
        self._pending: collections.deque[tuple[int, int, Future, RowStack | None]] = (
            collections.deque()
        )
        self._in_flight = 0
        self._chunk = _FIRST_CHUNK
        self._element_bytes = 0  # of the last chunk's first element
        self._element_wall = 0.0  # the wall time of an element of the last chunk
        self._queued = 1  # chunks per reader: _QUEUED_PER_READER once chunks prove short
        # Batches taken whole (`_take_batch`): their size once a batch stage asks (0 while
        # chunks are of the tuned size); `_reset` sets the position they align to.
        self._batch_size = 0
        self._batch_misses = 0  # calls in a row that found no whole batch
        # Totals for `stats()`, kept per chunk so that recording costs nothing per
        # element: the consumer's time reading (no threads) or blocked on the
        # readers (threads), the readers' CPU time, elements handed out.
        self.waited_s = 0.0
        self.read_cpu_s = 0.0
        self._filter_check = FilterRatioCheck(f"the filters (or None records) before {dataset!r}")
        self._interrupted = False  # by close() from another thread: waits raise
        self._reset(0)

    def _reset(self, position: int) -> None:
        self._cancel_pending()
        self._next = position  # the position after the last element returned
        self._read_pos = position  # the first position not yet asked for
        self._align = position  # batches read whole start here (see `_take_batch`)
        self._values: list[Any] = []
        self._rows: RowStack | None = None  # the current chunk's part of a batch, if one
        self._filling: SharedRows | None = None  # the batch that `_submit` reads parts of
        self._filling_start = -1  # its first position
        self._cursor = 0
        self._chunk_start = position
        self._error: BaseException | None = None
        self._dropped = 0
        self._counted = 0
        # Where counting for `stats()` starts: the positions since, less those filtered.
        self._origin = position
        self._dropped_total = 0

    def _cancel_pending(self) -> None:
        for _, _, future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        self._in_flight = 0

    # -- reading chunks ----------------------------------------------------------------

    def _adapt(self, count: int, cpu: float, wall: float) -> None:
        """Sizes chunks to about `_TARGET_CHUNK_S` of CPU and at most `_MAX_CHUNK_WALL_S`.

        CPU time, not wall time, is the main measure: time spent waiting for the
        GIL while other readers run must not shrink the chunks (more chunks, more
        hand-offs, more waiting). The wall-time bound keeps chunks of waiting
        elements (I/O) small enough to spread over the threads and to start fast.
        """
        if count:
            wanted = min(
                int(_TARGET_CHUNK_S * count / max(cpu, 1e-9)),
                int(_MAX_CHUNK_WALL_S * count / max(wall, 1e-9)),
            )
            # Elements that wait (I/O) cost little CPU and grow big chunks; the cap
            # keeps enough chunks in flight for each of `width` threads to have one.
            cap = _MAX_CHUNK
            if self._tuner is not None and self._tuner.width:
                cap = max(1, min(cap, self._in_flight_limit() // self._tuner.width))
            if self._element_bytes:
                cap = max(1, min(cap, _MAX_CHUNK_BYTES // self._element_bytes))
            self._chunk = max(1, min(wanted, self._chunk * 4, cap))

    def _in_flight_limit(self) -> int:
        """Elements the readers may hold: `prefetch_buffer_size`, and at most the bytes bound.

        The bytes bound gives way to one element per reader of the tuner's width, so
        that large elements (batches of images) that pay with many threads get them;
        the width is at most `num_threads`, which the user chose.
        """
        limit = max(1, self._buffer_size)
        if self._element_bytes:
            readers = self._tuner.width if self._tuner is not None else 1
            by_bytes = max(_MAX_IN_FLIGHT_BYTES // self._element_bytes, readers)
            limit = max(1, min(limit, by_bytes))
        return limit

    def _submit(self) -> None:
        if self._pool is None:
            self._pool = DaemonPool(self._threads, "grain-read")
        width = self._tuner.width  # type: ignore[union-attr] # threads
        if width and self._pool.size != width:
            self._pool.resize(width)
        limit = self._in_flight_limit()
        while (
            self._read_pos < self._length
            and self._in_flight < limit
            and len(self._pending) < self._queued * width
        ):
            wanted = self._chunk_size()
            size = min(wanted, limit - self._in_flight)
            if self._batch_size and size < wanted and self._pending:
                break  # a part of a batch as tuned does not fit yet: once the consumer takes one
            start, stop = self._read_pos, self._read_pos + size
            rows = self._part_of_batch(start, size) if self._batch_size else None
            future = self._pool.submit(
                _read_chunk, self._source, start, stop, self._one_by_one, rows, busy=width
            )
            self._pending.append((start, stop, future, rows))
            self._in_flight += size
            self._read_pos = stop

    def _part_of_batch(self, start: int, size: int) -> RowStack | None:
        """The rows for chunk [start, start + size), a part of the batch that holds it.

        None for the parts of a batch whose first part was read before the
        batches were aligned here (after a filtered position): that batch comes
        one by one anyway.
        """
        batch_size = self._batch_size
        offset = (start - self._align) % batch_size
        if offset == 0:
            self._filling, self._filling_start = SharedRows(batch_size), start
        elif self._filling is None or self._filling_start != start - offset:
            return None
        return RowStack(size, self._filling, offset)

    def _chunk_size(self) -> int:
        """Positions of the next chunk: the tuned size, and with batches taken whole not
        past the next batch's bound."""
        left = self._length - self._read_pos
        if self._batch_size:
            size = self._batch_size
            bound = size - (self._read_pos - self._align) % size
            part = self._chunk
            if self._element_wall:
                # Parts larger than tuned chunks where few readers share a batch: each part
                # costs the consumer a hand-off. Enough of them to spread the batch over
                # the readers, none longer than _MAX_PART_S.
                width = max(1, self._tuner.width) if self._tuner is not None else 1
                spread = -(-size // (_PARTS_PER_READER * width))
                part = max(part, min(spread, int(_MAX_PART_S / self._element_wall)))
            return min(left, part, bound)
        return min(left, self._chunk)

    def _take_batch(self, size: int, batch_fn: Callable[[list[Any]], Any]) -> Any:
        """The next `size` elements stacked (the default batch_fn) by the readers, or None.

        A batch stage with the default batch_fn asks here first
        (`grain_dataset._map_stages._batch`). From the first call on, chunks end
        at the bounds of the batches, aligned to the position of that call, and
        each chunk's reader copies its elements' large arrays into the batch's
        rows as they come (`RowStack`): a batch is spread over the readers as
        any chunks are, and the consumer's thread does not copy it. None where
        the next elements are not such a batch: the stage then takes them one
        by one as before (the first batch after a change of size, the end of the
        epoch, a filtered position, an error, elements that do not stack ahead),
        and always without threads. After a filtered position the batches
        realign to where the consumer stands; once a batch is taken its
        elements are let go.
        """
        if self._tuner is None:
            # Read in the consumer's thread anyway: a batch taken whole would save no copy
            # and hold a batch of elements more (the allocator then faults fresh pages in).
            return None
        if batch_fn is not stack or self._chunk >= size or self._batch_misses >= _BATCH_MISSES:
            # Cheap elements (their chunks grow past a batch: parts of batches would cost
            # more hand-offs than the copy saves), or filtered positions or elements without
            # rows in batch after batch: chunks of the tuned size, and the consumer batches.
            self._batch_size = 0
            return None
        if size != self._batch_size:
            self._batch_size, self._align, self._filling = size, self._next, None
        if self._error is not None:
            return None
        if self._cursor == len(self._values):
            if self._values:
                self._count_filtered(len(self._values))
            if not self._next_chunk():
                return None  # the end: the one-by-one path ends the epoch as it does
        rows = self._rows
        if self._cursor or rows is None or rows.offset or rows.shared.size != size:
            if (self._next - self._align) % size:
                self._align = self._next  # a dropped position moved the batches' bounds
            self._batch_misses += 1
            return None
        # The chunk is the batch's first part: the others are the chunks after it.
        start, parts, values = self._chunk_start, [rows], list(self._values)
        whole = rows.whole
        while self._error is None and whole and len(values) < size:
            if not self._next_chunk():
                whole = False  # the end of the epoch: a short batch
                break
            values.extend(self._values)
            part = self._rows
            if part is None or part.shared is not rows.shared or not part.whole:
                whole = False
                break
            parts.append(part)
        batch = None
        if whole and self._error is None and len(values) == size:
            try:
                batch = batch_of(parts)
            except Exception:
                batch = None  # the consumer meets the error where it would have
        if batch is None:
            # The parts read so far become one chunk, handed out one by one.
            error = self._error
            self._chunk_start, self._values, self._cursor = start, values, 0
            self._rows, self._counted, self._error = None, 0, error
            self._batch_misses += 1
            return None
        self._batch_misses = 0
        # The elements are in the batch now: let their memory go before the next chunk.
        self._chunk_start, self._values, self._cursor = start, [None] * size, size
        self._rows, self._counted = None, 0
        self._next = start + size
        self._count_filtered(size)
        return batch

    def _wait(self, future: Future) -> None:
        """Waits for `future`, unless close() from another thread interrupts the wait.

        A reader thread stuck in user code never finishes its chunk: the wait
        then ends with the closed-iterator error (see `grain_dataset._runtime._guard`).
        """
        while not self._interrupted:
            try:
                future.exception(POLL_S)  # the chunk's own errors are raised by result()
                return
            except TimeoutError:
                continue
        raise closed_error(self)

    def _probe_after(self, count: int) -> float:
        """How long the start-up probe waits for a chunk of `count` elements before probing.

        `_START_WIDEN_S`, or half the time the chunk should take from the chunk
        before it, if shorter (not under `_MIN_PROBE_S`): elements that cost a
        millisecond (a JPEG to decode) show what they are within the second chunk,
        so the second reader starts then, not a window of chunks later.
        """
        if not self._element_wall:
            return _START_WIDEN_S
        return max(_MIN_PROBE_S, min(_START_WIDEN_S, 0.5 * count * self._element_wall))

    def _widen_if_costly(self, future: Future, count: int) -> None:
        """While an early chunk runs: more readers if it is costly and the GIL is free.

        The chunk of `count` elements is given `_probe_after` to end; if it has
        not, the wait doubles as the probe: a reader in Python code holds
        the GIL, so the consumer, after each hand-off of the GIL (`time.sleep(0)`),
        gets it back a switch interval late; a reader in C code (decoding) lets it in
        at once, and keeps computing meanwhile. A second reader starts if every
        hand-off came back at once while the reader computed; with one late, the
        tuner is told to try a second reader before reading inline. A reader that
        used next to no CPU meanwhile waits (I/O): if every hand-off came back at
        once, all the threads allowed start (`_WidthTuner.widen_at_start`). (The wake-up
        from the wait is not a probe: a busy machine makes it late now and then,
        and a reader the machine has stopped (other processes run) leaves the GIL
        free: hence the reader's CPU during the hand-offs.) The reader's CPU is
        its own thread's clock, where the platform has one, so other threads of
        the process do not count.
        """
        assert self._pool is not None
        assert self._tuner is not None
        tuner = self._tuner
        clock = self._pool.cpu_clock() or time.process_time
        began, cpu = time.perf_counter(), clock()
        try:
            future.exception(self._probe_after(count))
            return  # cheap: the tuner decides from its windows
        except TimeoutError:
            cpu = clock() - cpu
            waited = time.perf_counter() - began
        computing = cpu >= _COMPUTING_SHARE * waited
        late, probes, probes_cpu = 0, 0.0, clock()
        for _ in range(_GIL_PROBES):
            began = time.perf_counter()
            time.sleep(0)  # lets go of the GIL and takes it back
            took = time.perf_counter() - began
            probes += took
            late += took >= _GIL_FREE_LATENESS_S
            if late > 1:
                return  # the reader holds the GIL: a second one would only share it
        running = clock() - probes_cpu >= _COMPUTING_SHARE * probes
        if not computing:
            # A reader that waits (I/O), unless the hand-offs say it holds the GIL: it
            # may be a reader in Python that the machine stopped (other processes run).
            waiting = not late
        elif late or not running:
            tuner.gil_free_seen = True  # not enough to widen now: the tuner tries it
            return
        else:
            waiting = False
        tuner.in_flight = len(self._pending)
        if not late and tuner.widen_at_start(waiting):
            self._submit()

    def _interrupt(self) -> tuple[()]:
        """close() from another thread: a waiting `next()` raises (see `_guard`)."""
        self._interrupted = True
        return ()

    def _next_chunk(self) -> bool:
        """Loads the next chunk into `_values`; False at the end of the epoch."""
        tuner = self._tuner
        # No threads, or the tuner's width 0: read in this thread (after what is pending).
        inline = tuner is None or (tuner.width == 0 and not self._pending)
        if inline:
            if self._read_pos >= self._length:
                return False
            start = self._read_pos
            stop = start + self._chunk_size()
            rows = self._part_of_batch(start, stop - start) if self._batch_size else None
            values, error, cpu, wall = _read_chunk(
                self._source, start, stop, self._one_by_one, rows
            )
            self.waited_s += wall
            self._read_pos = stop
            if tuner is not None:
                tuner.record(stop - start, wall, cpu)
        else:
            assert tuner is not None
            self._submit()
            if not self._pending:
                return False
            start, stop, future, rows = self._pending[0]
            ready, began = future.done(), time.perf_counter()
            if not ready:
                if tuner.at_start:
                    self._widen_if_costly(future, stop - start)
                self._wait(future)
            self._pending.popleft()
            self._in_flight -= stop - start
            values, error, cpu, wall = future.result()
            # Parts of a batch (`_take_batch`) are queued too: each reader's part of a
            # batch taken whole ends at its own time, and its next one must not wait for
            # the consumer to take the part before it.
            short = wall < _SHORT_CHUNK_S or rows is not None
            self._queued = _QUEUED_PER_READER if short else 1
            waited = 0.0 if ready else time.perf_counter() - began
            self.waited_s += waited
            tuner.in_flight = len(self._pending)
            tuner.record(stop - start, waited, cpu)
            self._submit()
        self.read_cpu_s += cpu
        if values:
            self._element_bytes = _element_bytes(values)
        if values:
            self._element_wall = wall / len(values)
        self._adapt(len(values), cpu, wall)
        self._chunk_start, self._values, self._cursor = start, values, 0
        self._rows = rows
        self._counted = 0  # positions of this chunk given to the filter check
        self._error = error
        return True

    def _fail(self) -> None:
        error = self._error
        position = self._chunk_start + len(self._values)
        self._reset(position)
        assert error is not None
        raise error

    def _count_filtered(self, cursor: int) -> None:
        """Hands the positions of this chunk up to `cursor` to the filter-ratio check."""
        self._dropped_total += self._dropped
        self._filter_check.add(cursor - self._counted, self._dropped, options_of(self))
        self._dropped = 0
        self._counted = cursor

    def __next__(self) -> Any:
        values, cursor = self._values, self._cursor
        while True:
            if cursor < len(values):
                value = values[cursor]
                cursor += 1
                if value is not None or self._allow_nones:
                    self._cursor = cursor
                    self._next = self._chunk_start + cursor
                    if self._dropped >= _JUDGE_RUN:
                        # A long run of drops inside one chunk is judged now, not at its end.
                        self._count_filtered(cursor)
                    return value
                self._dropped += 1
                continue
            self._cursor = cursor
            if self._error is not None:
                self._next = self._chunk_start + cursor
                self._fail()
            if values:
                self._count_filtered(len(values))
            if not self._next_chunk():
                self._next = self._length
                self._filter_check.end(options_of(self))
                raise StopIteration
            values, cursor = self._values, 0

    # -- the DatasetIterator contract --------------------------------------------------------

    _STATS_SELF_COUNTED = True

    def _stats_counts(self) -> tuple[int, float]:
        """Elements handed out since the last restore, and seconds reading or waiting."""
        return self._next - self._origin - self._dropped_total - self._dropped, self.waited_s

    def _stats_reader_times(self) -> tuple[float, float]:
        return self.waited_s, self.read_cpu_s

    def get_state(self) -> dict[str, Any]:
        return {"next_index": self._next}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("next_index",))
        position = state["next_index"]
        if position > self._length:
            raise OutOfRangeError(
                f"Checkpoint `next_index` {position} is out of range for dataset of length "
                f"{self._length}. "
                f"state['next_index']={position} is past the end of this dataset "
                f"(length {self._length}): the state is from a different pipeline."
            )
        if position:
            self._filter_check.restored()
        self._reset(position)

    def _get_next_index(self) -> int:
        return self._next

    def _set_next_index(self, index: int) -> None:
        if index > self._length:
            raise OutOfRangeError(
                f"Checkpoint `next_index` {index} is out of range for dataset of length "
                f"{self._length}. Index {index} is past the end of this dataset."
            )
        if index:
            self._filter_check.restored()
        self._reset(index)

    def start_prefetch(self) -> None:
        if self._threads:
            self._submit()

    def close(self) -> None:
        self._cancel_pending()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __del__(self) -> None:
        # At interpreter exit module globals may already be gone (free-threaded CPython
        # finalizes these after its modules are cleared): stay silent, with no global
        # here (not contextlib.suppress, which is one).
        try:  # noqa: SIM105
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"PrefetchDatasetIterator(next_index={self._next}, length={self._length})"
