"""`InterleaveIterDataset`: read many datasets at once, one element from each in turn.

The model: `datasets` is random access (a MapDataset or a sequence), dataset i
being ``datasets[i]``. The iterator has `cycle_length` *slots*. At the start,
slot j holds an iterator over dataset j (for j < the number of datasets; the
other slots stay empty for good). Output is round robin over the slots:

  1. Ask the iterator in the current slot for an element. If it has one, that
     is the output, and the turn passes to the next slot (wrapping around).
  2. If it is exhausted, the slot is refilled with an iterator over the next
     dataset not yet opened (the lowest index) and the turn passes to the next
     slot: the new iterator gives its first element on the slot's next turn,
     as in Grain. When every dataset has been opened, the slot stays exhausted
     and is skipped from then on.
  3. The output ends when every slot is empty or exhausted.

So cycle_length=1 chains the datasets, and a cycle_length of at least the
number of datasets takes one element of each in turn until each runs out. The
order depends only on the datasets' lengths, never on thread timing.

Threads only make the same order faster. `num_make_iter_threads` threads open
datasets ahead of time -- ``datasets[i]``, ``iter()`` and, through
`iter_buffer_size`, the first elements -- for the initial slots and for the
`make_iter_buffer_size` datasets that come next, so a slow file open overlaps
with reading the others. Each open iterator is read ahead by a
ThreadPrefetchDatasetIterator of `iter_buffer_size` elements (0: read in the
caller's thread), so up to cycle_length + num_make_iter_threads threads run.

State, Grain's::

    {"next_index_in_cycle": c, "next_index_in_datasets": k,
     "iterators_in_use_indices": [i, ...], "iterators_in_use_states": [state, ...],
     "exhausted": [0 or 1, ...], "future_states": {}}

with one entry per slot that holds a dataset (min(cycle_length, number of
datasets) of them): c is the slot whose turn it is, k the next dataset to
open, and an exhausted slot keeps its dataset's index and final state. Grain
marks a slot exhausted when its iterator ends and opens the next dataset for
it on the slot's next turn; this iterator opens it at once (so that threads
can open it ahead) and remembers the dataset it replaced (`_Slot.previous`)
until the new one gives its first element, so its states are Grain's at every
point and a Grain state restores here (its future_states, datasets Grain opened
ahead, are not positions and are ignored). States of earlier versions of this
library, ``{"next_dataset", "slot", "iterators": [{"dataset", "state"} or
None]}``, restore as well. `get_state` waits for the datasets in the slots to be opened
(their iterators' states are needed) and raises the error of one that cannot
be. `set_state` reopens each dataset of the state and restores its iterator,
in the opening threads, before it returns; datasets opened ahead are not part
of the state and are opened again.

Elements of `datasets` may be IterDatasets, MapDatasets (read with their
`to_iter_dataset()`) or other re-iterable objects such as lists, whose state
is the number of elements read and is restored by reading that many again. A
one-shot iterator (a generator) cannot be reopened, so it is rejected. For a
MapDataset of datasets, a filtered (None) position counts as an empty dataset.

Errors: an exception from opening or reading dataset i is raised with a note
naming i, at the position where that dataset's element would have been; the
turn stays with that slot, so the next call asks the same iterator again (or
tries the opening again).

Shutdown: `close()` (also run by `del` and the garbage collector) stops the
opening threads and closes the open iterators, remembering their states; the
threads hold the datasets and their tasks, never the interleave iterator. The
interleave iterator the user holds then refuses `next()`; a stage that closes
an interleave inside it and reads on reopens the datasets where they were.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from grain_dataset._core._base import DatasetIterator, IterDataset, MapDataset, _adopt
from grain_dataset._core._state import check_state
from grain_dataset._core._worker_slice import WorkerSlice, iter_with_slice
from grain_dataset._runtime._fingerprint import token, unstamped
from grain_dataset._threads._daemon_pool import DaemonPool
from grain_dataset._threads._thread_prefetch import ThreadPrefetchDatasetIterator
from grain_index import checks

T = TypeVar("T")

OPEN_THREAD_NAME = "grain-interleave-open"

_STATE_KEYS = ("iterators", "next_dataset", "slot")  # states of earlier versions
_GRAIN_KEYS = (
    "next_index_in_cycle",
    "next_index_in_datasets",
    "iterators_in_use_indices",
    "iterators_in_use_states",
    "exhausted",
    "future_states",
)


class InterleaveIterDataset(IterDataset[T]):
    """The elements of many datasets, one from each of `cycle_length` open datasets in turn.

    Args:
      datasets: a MapDataset or a sequence whose elements are datasets
        (IterDataset, MapDataset or any re-iterable, e.g. a list).
      cycle_length: how many datasets are read at once (>= 1).
      num_make_iter_threads: threads that open datasets ahead of time (>= 0;
        0 opens each one in the caller's thread when its turn comes).
      make_iter_buffer_size: how many datasets beyond those being read are
        opened ahead (>= 0; needs num_make_iter_threads > 0).
      iter_buffer_size: elements read ahead from each open dataset by its own
        thread (>= 0). The default 0 reads in the caller's thread: handing an
        element between threads costs microseconds, so for local files and
        cheap elements it is fastest (100-byte TFRecords: ~390k records/s,
        against ~67k with 1 and ~200k with 16-64). Use a few dozen when each
        read waits on remote storage.

    When a dataset runs out, its slot takes the next dataset in order and
    yields at once; the order is deterministic (see the module docstring).

    Example::

        files = grain.MapDataset.source(filenames).map(TFRecordIterDataset)
        ds = grain.experimental.InterleaveIterDataset(files, cycle_length=4)
        # the first record of files 0, 1, 2, 3, the second of each, ...
    """

    _order_as_grain = False

    def _fingerprint_token(self) -> str | None:
        return token("interleave", self._cycle_length)

    def __init__(
        self,
        datasets: MapDataset[Any] | Sequence[Any],
        *,
        cycle_length: int,
        num_make_iter_threads: int = 1,
        make_iter_buffer_size: int = 1,
        iter_buffer_size: int = 0,
    ):
        if isinstance(datasets, MapDataset):
            parents: list[Any] = [datasets]
            self._count = len(datasets)
        elif isinstance(datasets, IterDataset):
            raise TypeError(
                "`datasets` of InterleaveIterDataset must be random access (a MapDataset or "
                "a list) to reopen dataset i on restore; got an IterDataset. Build it with "
                "grain.MapDataset.source(filenames).map(make_dataset) instead."
            )
        elif isinstance(datasets, str | bytes) or not isinstance(datasets, Sequence):
            raise TypeError(
                "`datasets` of InterleaveIterDataset must be a MapDataset or a sequence of "
                f"datasets, got {type(datasets).__name__}."
            )
        else:
            datasets = list(datasets)
            for index, dataset in enumerate(datasets):
                problem = _not_reiterable(dataset)
                if problem:
                    raise TypeError(f"`datasets[{index}]` of InterleaveIterDataset {problem}")
            parents = [d for d in datasets if isinstance(d, MapDataset | IterDataset)]
            self._count = len(datasets)
        super().__init__(parents)
        self._datasets = datasets
        self._cycle_length = checks.int_in_range(cycle_length, "cycle_length", 1)
        self._num_threads = checks.int_in_range(num_make_iter_threads, "num_make_iter_threads", 0)
        self._ahead = checks.int_in_range(make_iter_buffer_size, "make_iter_buffer_size", 0)
        self._iter_buffer_size = checks.int_in_range(iter_buffer_size, "iter_buffer_size", 0)

    @property
    def cycle_length(self) -> int:
        """How many datasets are read at once."""
        return self._cycle_length

    def __iter__(self) -> DatasetIterator[T]:
        return _InterleaveIterator(self)

    def __repr__(self) -> str:
        return (
            f"InterleaveIterDataset(cycle_length={self._cycle_length}, "
            f"num_make_iter_threads={self._num_threads}, "
            f"make_iter_buffer_size={self._ahead}, iter_buffer_size={self._iter_buffer_size})"
        )


# -- opening one dataset ------------------------------------------------------------------


def _not_reiterable(dataset: Any) -> str | None:
    """Why `dataset` cannot be interleaved (a sentence), or None if it can."""
    if isinstance(dataset, MapDataset | IterDataset):
        return None
    if isinstance(dataset, str | bytes):
        return (
            f"is the string {dataset!r}, not a dataset: map file names to datasets first, "
            "e.g. grain.MapDataset.source(filenames).map(TFRecordIterDataset)."
        )
    if isinstance(dataset, Iterator):
        return (
            f"is a one-shot iterator ({type(dataset).__name__}), which cannot be reopened "
            "when a state is restored: pass an IterDataset or a re-iterable such as a list."
        )
    if not isinstance(dataset, Iterable):
        return f"must be a dataset or an iterable, got {type(dataset).__name__} {dataset!r}."
    return None


def _note(error: BaseException, index: int, stage: str) -> None:
    """Adds a note naming dataset `index` to `error` (once); its type and traceback stay."""
    text = f"grain: raised by dataset {index} of {stage}"
    if text not in getattr(error, "__notes__", ()):
        error.add_note(text)


class _ReiterableIterator(DatasetIterator[Any]):
    """An iterator over any re-iterable, with the number of elements read as its state."""

    def __init__(self, iterable: Iterable[Any], index: int):
        super().__init__()
        self._iterable = iterable
        self._dataset_index = index
        self._iterator = iter(iterable)
        self._read = 0

    def __next__(self) -> Any:
        value = next(self._iterator)
        self._read += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return {"index": self._read}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, f"the iterator over dataset {self._dataset_index}", ("index",))
        iterator = iter(self._iterable)
        # A plain iterable has no positions: read up to the state's one again.
        for read in range(state["index"]):
            try:
                next(iterator)
            except StopIteration:
                raise ValueError(
                    f"state {state!r} is past the end of dataset {self._dataset_index}, which "
                    f"has {read} elements: the state is from different data."
                ) from None
        self._iterator, self._read = iterator, state["index"]


def _open(
    datasets: Any,
    index: int,
    iter_buffer_size: int,
    state: Any,
    stage: str,
    worker_slice: WorkerSlice | None = None,
) -> DatasetIterator[Any]:
    """An iterator over dataset `index`, at `state` if given, reading ahead if asked.

    Runs in an opening thread: it holds only the datasets, never the interleave
    iterator. In a worker, the dataset is part of the worker's pipeline: its
    iterator reads `worker_slice`, the interleave's (``datasets[index]`` runs
    without it, being user code).
    """
    try:
        dataset = datasets[index]
        if dataset is None and isinstance(datasets, MapDataset):
            dataset = ()  # a filtered position: nothing to read
        problem = _not_reiterable(dataset)
        if problem:
            raise TypeError(f"dataset {index} of {stage} {problem}")
        if isinstance(dataset, MapDataset | IterDataset):
            iterator = iter_with_slice(dataset, worker_slice)
            if not isinstance(iterator, DatasetIterator):
                iterator = _ReiterableIterator(dataset, index)
            # Its state is part of the interleave's, whose fingerprint covers the pipeline.
            unstamped(iterator)
        else:
            iterator = _ReiterableIterator(dataset, index)
        if state is not None:
            iterator.set_state(state)
        if iter_buffer_size:
            iterator = ThreadPrefetchDatasetIterator(iterator, iter_buffer_size, dataset=dataset)
            iterator.start_prefetch()
    except StopIteration as error:
        # Leaking a StopIteration would end the interleave's output silently.
        wrapped = RuntimeError(f"opening dataset {index} of {stage} raised StopIteration.")
        _note(wrapped, index, stage)
        raise wrapped from error
    except Exception as error:
        _note(error, index, stage)
        raise
    return iterator


def _close_opened(future: Future) -> None:
    """Closes the iterator a discarded opening produced, whenever it finishes."""
    if not future.cancelled() and future.exception() is None:
        with contextlib.suppress(Exception):
            future.result().close()


def _discard(future: Future | None) -> None:
    if future is not None and not future.cancel():
        future.add_done_callback(_close_opened)


# -- the iterator --------------------------------------------------------------------------


def _is_future(key: Any, next_dataset: int, count: int) -> bool:
    """Whether `key` of Grain's future_states names a dataset not opened yet (JSON: a str)."""
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    return isinstance(key, int) and not isinstance(key, bool) and next_dataset <= key < count


class _Slot:
    """One place of the round robin: a dataset index and its iterator, open or opening.

    `state` is the iterator's last state once it is exhausted (or closed), and
    before that the state to restore when it is opened (None: from the start).
    """

    __slots__ = ("exhausted", "index", "iterator", "opening", "previous", "state")

    def __init__(
        self,
        index: int,
        opening: Future | None = None,
        iterator: DatasetIterator[Any] | None = None,
        state: Any = None,
    ):
        self.index = index
        self.opening = opening
        self.iterator = iterator
        self.exhausted = False
        self.state = state
        # (index, final state) of the exhausted dataset this slot's dataset replaced, until
        # the new one gives an element: Grain's state still shows the old one then.
        self.previous: tuple[int, Any] | None = None

    def discard(self, keep_state: bool) -> None:
        """Closes the iterator or drops its opening; `keep_state` to reopen it where it was."""
        _discard(self.opening)
        self.opening = None
        if self.iterator is not None:
            iterator, self.iterator = self.iterator, None
            try:
                if keep_state and not self.exhausted:
                    self.state = iterator.get_state()
            finally:
                iterator.close()


class _InterleaveIterator(DatasetIterator[Any]):
    def __init__(self, dataset: InterleaveIterDataset[Any]):
        super().__init__()
        self._dataset = dataset
        self._stage = repr(dataset)
        self._cycle = dataset._cycle_length
        self._count = dataset._count
        self._threads = dataset._num_threads
        self._ahead_size = dataset._ahead if self._threads else 0
        self._pool: DaemonPool | None = None
        self._slots: list[_Slot | None] = [None] * self._cycle
        # Datasets next_dataset, next_dataset + 1, ... being opened before a slot needs them.
        self._ahead: collections.deque[Future | None] = collections.deque()
        self._next_dataset = 0
        self._slot = 0
        self._started = False
        self._closed = False

    # -- opening -----------------------------------------------------------------------

    def _opener(self, index: int, state: Any = None) -> Callable[[], DatasetIterator[Any]]:
        dataset = self._dataset
        return functools.partial(
            _open,
            dataset._datasets,
            index,
            dataset._iter_buffer_size,
            state,
            self._stage,
            self._ctx.worker_slice,
        )

    def _open_async(self, index: int, state: Any = None) -> Future | None:
        """Starts opening dataset `index` in a thread; None when there are no threads."""
        if not self._threads:
            return None
        if self._pool is None:
            self._pool = DaemonPool(self._threads, OPEN_THREAD_NAME)
        return self._pool.submit(self._opener(index, state))

    def _fill_ahead(self) -> None:
        index = self._next_dataset + len(self._ahead)
        while len(self._ahead) < self._ahead_size and index < self._count:
            self._ahead.append(self._open_async(index))
            index += 1

    def _take_next(self) -> _Slot:
        """A slot for the next dataset, using its opening ahead if there is one."""
        index = self._next_dataset
        self._next_dataset += 1
        opening = self._ahead.popleft() if self._ahead else self._open_async(index)
        self._fill_ahead()
        return _Slot(index, opening)

    def _ensure_open(self) -> None:
        """Opens the first datasets, or after `close` reopens those of the slots."""
        if not self._started:
            self._started = True
            for position in range(min(self._cycle, self._count)):
                self._slots[position] = self._take_next()
        elif self._closed:
            self._closed = False
            for slot in self._slots:
                if slot is not None and not slot.exhausted:
                    slot.opening = self._open_async(slot.index, slot.state)
            self._fill_ahead()

    def _iterator(self, slot: _Slot) -> DatasetIterator[Any]:
        """The slot's iterator, waiting for (or doing) its opening."""
        if slot.iterator is None:
            opening, slot.opening = slot.opening, None
            # Without an opening: no threads, or one that failed and is tried again here.
            if opening is not None:
                iterator = opening.result()
            else:
                iterator = self._opener(slot.index, slot.state)()
            _adopt(self._ctx, iterator)
            slot.iterator, slot.state = iterator, None
        return slot.iterator

    # -- the DatasetIterator contract --------------------------------------------------------

    def __next__(self) -> Any:
        self._ensure_open()
        slots, cycle = self._slots, self._cycle
        dead = 0  # consecutive slots found empty or exhausted
        while dead < cycle:
            position = self._slot
            slot = slots[position]
            if slot is None or slot.exhausted:
                self._slot = (position + 1) % cycle
                dead += 1
                continue
            iterator = self._iterator(slot)
            try:
                value = next(iterator)
            except StopIteration:
                if self._next_dataset < self._count:
                    refill = slots[position] = self._take_next()
                    refill.previous = (slot.index, iterator.get_state())
                    iterator.close()
                    self._slot = (position + 1) % cycle
                else:
                    slot.state = iterator.get_state()
                    slot.exhausted = True
                    slot.iterator = None
                    iterator.close()
                continue
            except Exception as error:
                _note(error, slot.index, self._stage)
                raise
            slot.previous = None
            self._slot = (position + 1) % cycle
            return value
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        self._ensure_open()
        used = [slot for slot in self._slots if slot is not None]  # a prefix of the slots
        indices: list[int] = []
        states: list[Any] = []
        exhausted: list[int] = []
        pending = 0
        for slot in used:
            if slot.exhausted:
                index, state, done = slot.index, slot.state, 1
            elif slot.previous is not None:
                (index, state), done = slot.previous, 1
                pending += 1
            else:
                index, state, done = slot.index, self._iterator(slot).get_state(), 0
            indices.append(index)
            states.append(state)
            exhausted.append(done)
        return {
            "next_index_in_cycle": self._slot if self._slot < len(used) else 0,
            "next_index_in_datasets": self._next_dataset - pending,
            "iterators_in_use_indices": indices,
            "iterators_in_use_states": states,
            "exhausted": exhausted,
            "future_states": {},
        }

    def _check_grain(self, state: dict[str, Any]) -> tuple[Any, ...]:
        """(entries, exhausted, pending, next dataset, slot) of a state in Grain's shape.

        entries: (slot, dataset, state) to open and restore; exhausted: slot ->
        (dataset, final state); pending: slot -> (dataset to open, (dataset, final
        state) it replaces), Grain's exhausted slots that its next turn refills.
        """
        stage = self._stage
        check_state(state, stage, _GRAIN_KEYS, nested=_GRAIN_KEYS[2:])
        used = min(self._cycle, self._count)
        cycle, next_dataset = state["next_index_in_cycle"], state["next_index_in_datasets"]
        indices = state["iterators_in_use_indices"]
        states = state["iterators_in_use_states"]
        flags = state["exhausted"]
        problem = None
        lists = (indices, states, flags)
        if not all(isinstance(entry, list | tuple) and len(entry) == used for entry in lists):
            problem = (
                f"iterators_in_use_indices, iterators_in_use_states and exhausted must list "
                f"one entry per slot in use ({used})"
            )
        elif next_dataset > self._count:
            problem = f"next_index_in_datasets={next_dataset} is past the {self._count} datasets"
        elif cycle >= max(used, 1):
            problem = f"next_index_in_cycle={cycle} is not below the {used} slots in use"
        elif not isinstance(state["future_states"], dict) or not all(
            _is_future(key, next_dataset, self._count) for key in state["future_states"]
        ):
            problem = (
                "future_states must map indices of datasets not yet in use (from "
                f"next_index_in_datasets={next_dataset} on) to states, got "
                f"{state['future_states']!r:.200}"
            )
        elif any(type(flag) is not int or flag not in (0, 1) for flag in flags):
            problem = f"exhausted must hold 0 or 1 per slot, got {flags!r}"
        elif any(sub is None for sub in states):
            problem = "iterators_in_use_states must hold each slot's iterator state, not None"
        elif not all(type(i) is int and 0 <= i < next_dataset for i in indices) or len(
            set(indices)
        ) != len(indices):
            problem = (
                f"iterators_in_use_indices={indices!r} must be distinct dataset indices below "
                f"next_index_in_datasets={next_dataset}"
            )
        if problem is not None:
            raise ValueError(
                f"this state does not fit {stage}: {problem}. Restore a state saved from the "
                "same pipeline, unmodified."
            )
        entries: list[tuple[int, int, Any]] = []
        exhausted: dict[int, tuple[int, Any]] = {}
        pending: dict[int, tuple[int, tuple[int, Any]]] = {}
        # Grain refills its exhausted slots in turn order from `cycle`, while datasets last.
        for position in [(cycle + step) % max(used, 1) for step in range(used)]:
            index, sub = indices[position], states[position]
            if not flags[position]:
                entries.append((position, index, sub))
            elif next_dataset < self._count:
                pending[position] = (next_dataset, (index, sub))
                next_dataset += 1
            else:
                exhausted[position] = (index, sub)
        return entries, exhausted, pending, next_dataset, cycle

    def _check(self, state: Any) -> list[tuple[int, int, Any]]:
        """(slot, dataset, state) of each iterator `state` names, after checking its shape."""
        stage = self._stage
        if isinstance(state, dict) and set(state) == set(_STATE_KEYS):
            check_state(
                {key: state[key] for key in ("next_dataset", "slot")}, stage, _STATE_KEYS[1:]
            )
        else:
            check_state(state, stage, _STATE_KEYS)  # raises, naming what is wrong
        next_dataset, slot, entries = state["next_dataset"], state["slot"], state["iterators"]
        problem = None
        if next_dataset > self._count:
            problem = f"next_dataset={next_dataset} is past the {self._count} datasets"
        elif slot >= self._cycle:
            problem = f"slot={slot} is not below cycle_length={self._cycle}"
        elif not isinstance(entries, list | tuple) or len(entries) != self._cycle:
            problem = f"'iterators' must list one entry per slot ({self._cycle}), got {entries!r}"
        if problem is None:
            found: list[tuple[int, int, Any]] = []
            seen = set()
            for position, entry in enumerate(entries):
                if entry is None:
                    continue
                if not isinstance(entry, dict) or set(entry) != {"dataset", "state"}:
                    problem = f"iterators[{position}] must be None or {{'dataset', 'state'}}"
                    break
                index = entry["dataset"]
                if (
                    isinstance(index, bool)
                    or not isinstance(index, int)
                    or not 0 <= index < next_dataset
                    or index in seen
                ):
                    problem = (
                        f"iterators[{position}]['dataset']={index!r} is not a distinct dataset "
                        f"index below next_dataset={next_dataset}"
                    )
                    break
                seen.add(index)
                found.append((position, index, entry["state"]))
            else:
                return found
        raise ValueError(
            f"this state does not fit {stage}: {problem}. Restore a state saved from the "
            "same pipeline, unmodified."
        )

    def set_state(self, state: dict[str, Any]) -> None:
        exhausted: dict[int, tuple[int, Any]] = {}
        pending: dict[int, tuple[int, tuple[int, Any]]] = {}
        if isinstance(state, dict) and "next_index_in_cycle" in state:
            entries, exhausted, pending, next_dataset, turn = self._check_grain(state)
        else:  # a state of an earlier version of this library
            entries = self._check(state)
            next_dataset, turn = state["next_dataset"], state["slot"]
        # Reopen every dataset of the state (in the opening threads, in parallel)
        # before touching this iterator, so a state that fails leaves it as it was.
        openings = [(pos, i, sub, self._open_async(i, sub)) for pos, i, sub in entries]
        slots: list[_Slot | None] = [None] * self._cycle
        try:
            for position, index, sub, opening in openings:
                iterator = opening.result() if opening else self._opener(index, sub)()
                _adopt(self._ctx, iterator)
                slots[position] = _Slot(index, iterator=iterator)
        except BaseException:
            for *_, opening in openings:
                _discard(opening)
            for slot in slots:
                if slot is not None:
                    slot.discard(keep_state=False)
            raise
        self._discard_all(keep_state=False)
        for position, (index, final) in exhausted.items():
            done = slots[position] = _Slot(index, state=final)
            done.exhausted = True
        for position, (index, previous) in pending.items():
            refill = slots[position] = _Slot(index, self._open_async(index))
            refill.previous = previous
        self._slots = slots
        self._next_dataset = next_dataset
        self._slot = turn
        self._started, self._closed = True, False
        self._fill_ahead()

    def _discard_all(self, keep_state: bool) -> None:
        for opening in self._ahead:
            _discard(opening)
        self._ahead.clear()
        errors = []
        for slot in self._slots:
            if slot is not None:
                try:
                    slot.discard(keep_state)
                except Exception as error:  # close the others all the same
                    errors.append(error)
        if errors:
            raise errors[0]

    def start_prefetch(self) -> None:
        """Starts opening (and reading ahead) the first datasets now."""
        self._ensure_open()

    def close(self) -> None:
        """Stops the opening threads and closes every open iterator; idempotent.

        The position is kept: reading on (or `get_state`) reopens the datasets
        of the slots where they were, as a restore would.
        """
        try:
            if self._started and not self._closed:
                self._closed = True
                self._discard_all(keep_state=True)
        finally:
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
        return (
            f"InterleaveDatasetIterator(next_dataset={self._next_dataset}, slot={self._slot}, "
            f"cycle_length={self._cycle})"
        )
