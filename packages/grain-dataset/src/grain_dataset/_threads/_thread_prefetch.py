"""`ThreadPrefetchIterDataset`: read an IterDataset ahead in one background thread.

The model: one *producer* thread owns the parent iterator while it runs. It
calls ``next(parent)`` and then ``parent.get_state()``, and appends the pair to
a bounded buffer; the consumer (`__next__`) pops pairs off the buffer. The
producer asks for a new element only while fewer than `prefetch_buffer_size`
are buffered, so at most that many elements are ever read ahead.

State: the state of the iterator is the parent's state as it was right after
the last element handed to the consumer -- the state stored with that element.
Read-ahead therefore never shows in a checkpoint, and a state restores the
same with or without this stage. The cost is one ``parent.get_state()`` call
per element, made in the producer thread (for the built-in stages that is a
small dict, microseconds).

Ownership of the parent: at any moment exactly one thread may touch the parent
iterator. While a producer runs, it does; `set_state` and a restart first stop
it and wait for it (`join`), and then rewind the parent to the consumer's
state, discarding what the producer had read ahead. `close` does not wait for
a producer stuck in a slow ``next(parent)``: it hands closing the parent to the
producer, which does it as it exits.

Errors: an exception raised by the parent is buffered like an element, with
the parent's state after it, and raised (the same object: its type, traceback
and notes) when the consumer reaches that position. The producer stops there;
the next `__next__` starts a new one, so what follows an error is exactly what
the parent yields when asked again. The end of the parent is sticky: every
later `__next__` raises StopIteration until `set_state` moves the iterator.

Parents that are not DatasetIterators: as in Grain, any iterator with
``get_state()`` and ``set_state(state)`` (Grain's "CheckpointableIterator")
may be the parent. It is wrapped in `_CheckpointableParent`, a DatasetIterator
that forwards those three calls; its state is exactly what its
``get_state()`` returns. Such a parent is never closed here (it has no
``close`` in that contract; its owner closes it), and its ``get_state`` and
``next`` are called from the background thread, one call at a time.

Idle work: if the parent declares ``_reads_ahead`` (grain_dataset._common._contract),
the producer calls its ``_read_ahead_step()`` while the buffer is full, until
it returns False (nothing more to do), instead of sleeping. device_put's host
buffer uses it to read host batches ahead in the same thread that transfers
them, saving a thread hand-off per batch. The step must not raise: it keeps
errors for its own ``__next__``.

Shutdown: the producer thread holds the parent iterator and the buffer, never
the consumer iterator, so `close()`, `del` or the garbage collector stop it. It
is a daemon thread: it never delays interpreter exit, and it catches every
exception, so nothing is printed at exit. A producer stuck in a parent that
never returns (a transformation that hangs) cannot be stopped: it stays, with
the parent iterator, until the parent returns, and then exits (closing the
parent). close() from another thread while the consumer waits for it makes
that `next()` raise the closed-iterator ValueError within `POLL_S`
(`_interrupt`, see `grain_dataset._runtime._guard`); so does a wait for a stopped
producer to let go of the parent (`set_state`).
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
from typing import Any, Protocol, TypeVar

from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._next_index import get_next_index, set_parent_next_index
from grain_dataset._runtime._guard import POLL_S, closed_error
from grain_index import checks

T = TypeVar("T")

THREAD_NAME = "grain-thread-prefetch"

_VALUE, _END, _ERROR = 0, 1, 2


class ThreadPrefetchIterDataset(IterDataset[T]):
    """The parent's elements, read ahead by a background thread.

    Args:
      parent: the IterDataset to read ahead.
      prefetch_buffer_size: how many elements the thread keeps ready (>= 0).
        0 reads in the caller's thread, without a background thread.

    The iterator's state is the parent's state at the last element returned, so
    checkpoints are the same with and without this stage. Each element costs one
    extra ``get_state()`` call on the parent, in the background thread.

    Example::

        ds = grain.MapDataset.source(source).to_iter_dataset().map(parse)
        ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=3)
        ds = ds.map(jax.device_put)  # overlaps with parsing the next elements
    """

    def _fingerprint_token(self) -> str | None:
        return None

    def __init__(self, parent: IterDataset[T], *, prefetch_buffer_size: int):
        # A MapDataset parent is read with to_iter_dataset(), as Grain accepts it.
        super().__init__(as_iter_dataset(parent, "parent", "ThreadPrefetchIterDataset"))
        self._buffer_size = checks.int_in_range(
            prefetch_buffer_size,
            "prefetch_buffer_size",
            0,
            lead="`prefetch_buffer_size` must be greater than or equal to 0, got {value}.",
        )

    @property
    def prefetch_buffer_size(self) -> int:
        """How many elements the background thread keeps ready."""
        return self._buffer_size

    def __iter__(self) -> DatasetIterator[T]:
        return ThreadPrefetchDatasetIterator(
            iter(self._parents[0]), self._buffer_size, dataset=self
        )

    def __repr__(self) -> str:
        return f"ThreadPrefetchIterDataset(prefetch_buffer_size={self._buffer_size})"


class _Buffer:
    """What a producer thread shares with its consumer: the items and the stop signal.

    The hand-off goes through two C-implemented `queue.SimpleQueue`s: `items`
    (producer to consumer) and `room` (one token per free slot, consumer to
    producer), so that waiting and waking cost no Python-level Condition (which
    made a one-element hand-off several times slower). `lock` guards only the
    rare shutdown fields.
    """

    __slots__ = ("close_parent", "done", "items", "lock", "room", "stopped")

    def __init__(self, capacity: int):
        self.items: queue.SimpleQueue[tuple[int, Any, Any]] = queue.SimpleQueue()
        self.room: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(capacity):
            self.room.put(None)
        self.lock = threading.Lock()
        self.stopped = False  # set by the consumer: produce nothing more
        self.done = False  # set by the producer as it exits
        self.close_parent = False  # the consumer closed while the producer was running


def _produce(parent: DatasetIterator[Any], buffer: _Buffer) -> None:
    """The producer thread: fills `buffer` from `parent` until stopped, the end or an error."""
    items, room = buffer.items, buffer.room
    # A parent may offer work to do while the buffer is full (see "Idle work").
    read_ahead = parent._read_ahead_step if parent._reads_ahead else None
    try:
        try:
            parent.start_prefetch()
        except BaseException as error:
            items.put((_ERROR, error, None))
            return
        while True:
            if read_ahead is None:
                room.get()
            else:
                while True:
                    try:
                        room.get_nowait()
                        break
                    except queue.Empty:
                        pass
                    if buffer.stopped or not read_ahead():
                        room.get()
                        break
            if buffer.stopped:
                return
            # Everything the parent raises goes to the consumer, even KeyboardInterrupt:
            # a thread must never die silently while the consumer waits for it.
            try:
                item: tuple[int, Any, Any] = (_VALUE, next(parent), None)
            except StopIteration:
                item = (_END, None, None)
            except BaseException as error:
                item = (_ERROR, error, None)
            try:
                item = (item[0], item[1], parent.get_state())
            except BaseException as error:
                item = (_ERROR, error, None)
            if buffer.stopped:
                return
            items.put(item)
            if item[0] != _VALUE:
                return
            del item
    finally:
        with buffer.lock:
            buffer.done = True
            close = buffer.close_parent
        if close:
            with contextlib.suppress(BaseException):
                parent.close()


_CHECKPOINTABLE = ("__next__", "get_state", "set_state")
T_co = TypeVar("T_co", covariant=True)


class _CheckpointableIterator(Protocol[T_co]):
    """What a parent that is not a DatasetIterator must offer (Grain's CheckpointableIterator)."""

    def __next__(self) -> T_co: ...

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


class _CheckpointableParent(DatasetIterator[T]):
    """A plain iterator with ``get_state``/``set_state``, seen as a DatasetIterator."""

    def __init__(self, iterator: Any):
        super().__init__()
        self._iterator = iterator

    def __next__(self) -> T:
        return next(self._iterator)

    def get_state(self) -> Any:
        return self._iterator.get_state()

    def set_state(self, state: Any) -> None:
        self._iterator.set_state(state)

    def close(self) -> None:
        # The contract has no close(): the iterator's owner ends it, as in Grain.
        pass

    def __repr__(self) -> str:
        return f"checkpointable iterator {type(self._iterator).__name__}"


def _as_dataset_iterator(parent: Any) -> DatasetIterator[Any]:
    if isinstance(parent, DatasetIterator):
        return parent
    missing = [name for name in _CHECKPOINTABLE if not callable(getattr(parent, name, None))]
    if missing:
        raise TypeError(
            "`parent` of ThreadPrefetchDatasetIterator must be an iterator with get_state() "
            f"and set_state(state), such as iter(dataset); {type(parent).__name__} lacks "
            f"{', '.join(missing)}. For a dataset use "
            "grain.experimental.ThreadPrefetchIterDataset."
        )
    return _CheckpointableParent(parent)


class ThreadPrefetchDatasetIterator(DatasetIterator[T]):
    """Reads `parent` ahead in a background thread; see the module docstring.

    Also used by InterleaveIterDataset to read each open iterator ahead.

    Args:
      parent: the iterator to read ahead; this iterator owns it from now on. A
        DatasetIterator, or any iterator with ``get_state()`` and
        ``set_state(state)`` (its states are then passed through as they are).
      prefetch_buffer_size: at most this many elements are read ahead (0: no thread).
      dataset: the dataset shown in error messages and statistics.

    Example::

        it = grain.experimental.ThreadPrefetchDatasetIterator(iter(ds), 16)
    """

    # For statistics: its calls wait on the producer thread (timed every call, and its
    # parents' time is not inside its own).
    _STATS_ASYNC = True
    _closed_wording = "Attempting to use a closed iterator."  # Grain's, for this class

    def __init__(
        self,
        parent: DatasetIterator[T] | _CheckpointableIterator[T],
        prefetch_buffer_size: int,
        *,
        dataset: Any = None,
    ):
        parent = _as_dataset_iterator(parent)
        buffer_size = checks.int_in_range(
            prefetch_buffer_size,
            "prefetch_buffer_size",
            0,
            lead="`prefetch_buffer_size` must be greater than or equal to 0, got {value}.",
        )
        super().__init__(parent)
        self._dataset = dataset
        self._parent = parent
        self._buffer_size = buffer_size
        self._buffer: _Buffer | None = None
        self._thread: threading.Thread | None = None
        # A stopped producer that may still be inside next(parent); joined before
        # this iterator touches the parent again.
        self._stale: threading.Thread | None = None
        # The parent's state as of the last element returned; None until a
        # producer first runs (the parent itself is then exactly there).
        self._state: Any = None
        # The parent may be ahead of `_state` (a producer read ahead and was stopped).
        self._ahead = False
        self._ended = False
        # close() handed closing the parent to a producer still inside next(parent).
        self._handed_over = False
        # Set by close() from another thread (`_interrupt`): waits raise instead.
        self._interrupted = False

    # -- the producer ----------------------------------------------------------------

    def _reclaim(self) -> None:
        """Makes the parent this thread's again: waits for a stopped producer, rewinds."""
        self._join_stale()
        if self._ahead:
            self._parent.set_state(self._state)
            self._ahead = False

    def _join_stale(self) -> None:
        """Waits until a stopped producer has let go of the parent (see `_interrupt`)."""
        stale = self._stale
        if stale is None:
            return
        while True:
            stale.join(POLL_S)
            if not stale.is_alive():
                break
            if self._interrupted:
                raise closed_error(self)
        self._stale = None
        self._handed_over = False  # it closed the parent as it exited, if it was to

    def _interrupt(self) -> tuple[()]:
        """close() from another thread: stop the producer, end the consumer's waits.

        Runs while the consumer may be inside `__next__` (see `grain_dataset._runtime._guard`):
        it only sets flags and wakes a producer waiting for room.
        """
        self._interrupted = True
        buffer = self._buffer
        if buffer is not None:
            buffer.stopped = True
            buffer.room.put(None)
        return ()

    def _start(self) -> None:
        if self._interrupted:
            raise closed_error(self)
        self._reclaim()
        if self._state is None:
            self._state = self._parent.get_state()
        buffer = _Buffer(self._buffer_size)
        thread = threading.Thread(
            target=_produce, args=(self._parent, buffer), name=THREAD_NAME, daemon=True
        )
        thread.start()
        self._buffer, self._thread = buffer, thread

    def _stop(self, close_parent: bool = False) -> bool:
        """Stops the producer, discarding its buffer; True if it will close the parent."""
        buffer, thread = self._buffer, self._thread
        if buffer is None:
            return False
        self._buffer = self._thread = None
        with buffer.lock:
            buffer.stopped = True
            handed_over = close_parent and not buffer.done
            buffer.close_parent = handed_over
        self._handed_over = handed_over
        buffer.room.put(None)  # wakes a producer waiting for room, which then sees `stopped`
        # Drop what was read ahead now, not when the buffer is collected.
        with contextlib.suppress(queue.Empty):
            while True:
                buffer.items.get_nowait()
        self._stale = thread
        self._ahead = True
        return handed_over

    # -- the DatasetIterator contract --------------------------------------------------

    def __next__(self) -> T:
        if not self._buffer_size:
            return next(self._parent)
        buffer = self._buffer
        if buffer is None:
            if self._ended:
                raise StopIteration
            self._start()
            buffer = self._buffer
            assert buffer is not None
        items = buffer.items
        while True:
            try:
                kind, value, state = items.get(True, POLL_S)
                break
            except queue.Empty:
                if self._interrupted:
                    raise closed_error(self) from None
        buffer.room.put(None)
        if kind == _VALUE:
            self._state = state
            return value
        # The producer exits after the end or an error: wait for it, so that the
        # parent is ours again, exactly at the state that came with this item.
        assert self._thread is not None
        self._thread.join()
        self._buffer = self._thread = None
        if state is not None:
            self._state = state
        else:
            # get_state() itself failed: the parent's position is unknown, so the
            # next producer starts from wherever the parent is.
            self._state = None
        if kind == _END:
            self._ended = True
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def get_state(self) -> dict[str, Any]:
        if not self._buffer_size or self._state is None:
            return self._parent.get_state()
        # A copy: the caller may change the dict, and the same one is returned again.
        return copy.deepcopy(self._state)

    def set_state(self, state: dict[str, Any]) -> None:
        if not self._buffer_size:
            self._parent.set_state(state)
            return
        self._stop()
        self._join_stale()
        # If the parent rejects the state, `_ahead` stays set: the next start
        # rewinds the parent to the last element returned, losing nothing.
        self._parent.set_state(state)
        self._ahead = False
        self._state = None
        self._ended = False

    def _get_next_index(self) -> int:
        if self._buffer_size:
            # Rewinds the parent to the consumer's position; the next `next` restarts.
            self._stop()
            self._reclaim()
        return get_next_index(self._parent)

    def _set_next_index(self, index: int) -> None:
        if self._buffer_size:
            self._stop()
            self._join_stale()
        set_parent_next_index(self, index)
        self._ahead = False
        self._state = None
        self._ended = False

    def start_prefetch(self) -> None:
        """Starts the background thread now instead of at the first `next`."""
        if not self._buffer_size:
            self._parent.start_prefetch()
        elif self._buffer is None and not self._ended:
            self._start()

    def close(self) -> None:
        """Stops the background thread and closes the parent; idempotent.

        A producer stuck inside the parent (a transformation that never returns)
        is not waited for: it closes the parent when the parent returns.
        """
        self._stop(close_parent=True)
        if self._handed_over:
            return  # a producer inside next(parent) closes the parent as it exits
        self._parent.close()

    def __del__(self) -> None:
        # At interpreter exit module globals may already be gone (free-threaded CPython
        # finalizes these after its modules are cleared): stay silent, with no global
        # here (not contextlib.suppress, which is one).
        try:  # noqa: SIM105
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"ThreadPrefetchDatasetIterator(prefetch_buffer_size={self._buffer_size})"
