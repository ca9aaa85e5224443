"""The worker side of the transport: `SegmentPool` (see grain_mp._transport for the model)."""

from __future__ import annotations

import collections
import contextlib
import io
import math
import os
import pickle
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from grain_mp._sweep import (
    create_unique_segment,
    process_alive,
    unlink_segment,
)
from grain_mp._transport import (
    _ALIGN,
    _DATA_AT,
    _HEADER,
    _MAGIC,
    _MAX_FLAT_KEYS,
    _SHARED_KINDS,
    _SINGLE_SKELETON,
    MIN_BYTES,
    MIN_SEGMENT_BYTES,
    Payload,
    _close_mapping,
    _layout,
    _pickle_whole,
    _Pickler,
    _Placeholder,
    _Segment,
    _size_class,
    _view,
)


class _PoolState:
    """A pool's segments, apart from the pool so that its finalizer can hold them."""

    __slots__ = ("alive", "closed", "free", "lent", "owner_pid", "pid")

    def __init__(self, owner_pid: int) -> None:
        self.pid = os.getpid()
        self.owner_pid = owner_pid
        self.free: dict[int, list[_Segment]] = {}
        self.lent: dict[str, _Segment] = {}
        # Segments under an array of `SegmentPool.empty` that is still alive here
        # (lent or not): reused only once that array is gone.
        self.alive: dict[str, _Segment] = {}
        self.closed = False


class _Owned:
    """An array `SegmentPool.empty` handed out: its segment, and what it was made as.

    The array is a view of a lease, an array over the segment's mapping that
    holds the mapping's buffer (so closing the mapping cannot unmap it). Every
    view of the array, ours or the user's, has the lease as its base, so the
    lease's weak reference (`ref`) dies exactly when the last of them does.
    """

    __slots__ = ("array", "dtype", "key", "ref", "segment", "shape")

    def __init__(
        self, lease: np.ndarray, array: np.ndarray, segment: _Segment, on_death: Any
    ) -> None:
        self.ref = weakref.ref(lease, on_death)
        self.array = weakref.ref(array)
        self.key = id(array)
        self.segment = segment
        self.shape = array.shape
        self.dtype = array.dtype

    def whole(self, array: np.ndarray) -> bool:
        """Whether `array` is this very array, with its shape, dtype and layout unchanged."""
        return (
            self.array() is array
            and array.shape == self.shape
            and array.dtype == self.dtype
            and array.flags.c_contiguous
        )


def _close_pool(state: _PoolState) -> None:
    if state.closed:
        return
    state.closed = True
    free = [segment for segments in state.free.values() for segment in segments]
    # Never sent (an error, a filter, an early close): nobody else will unlink them.
    free += [segment for name, segment in state.alive.items() if name not in state.lent]
    lent = list(state.lent.values())
    state.free.clear()
    state.lent.clear()
    state.alive.clear()
    # A forked child inherits the pool's objects: only the creating process unlinks.
    creator = os.getpid() == state.pid
    owner_gone = state.owner_pid != state.pid and not process_alive(state.owner_pid)
    for segment in free:
        if creator:
            unlink_segment(segment.name)
        _close_mapping(segment.mapping)
    for segment in lent:
        # Lent segments belong to the parent until it releases them, unless it is dead.
        if creator and owner_gone:
            unlink_segment(segment.name)
        _close_mapping(segment.mapping)


class SegmentPool:
    """The worker side: encodes elements into reusable shared memory segments.

    One pool per worker process. `encode`, `reclaim` and `close` are called
    from one thread at a time; `empty` from any thread (the read-ahead threads
    that stack batches), alongside them.

    Example::

        pool = SegmentPool(owner_pid=parent_pid, returns=return_queue)
        try:
            for element in elements:
                out_queue.put(pool.encode(element))
        finally:
            pool.close()

    Args:
        owner_pid: the pid of the process that decodes (the parent). It owns the
            lent segments: `sweep_dead_segments` removes them once it is gone.
        returns: where the parent sends back the names of released segments: an
            object with ``get_nowait()`` (a multiprocessing or `queue` Queue) or a
            `multiprocessing.connection.Connection`; each item a name or a list of
            names. Polled whenever no free segment fits; None to call `reclaim`
            yourself.
        min_bytes: arrays with fewer bytes are pickled inline.
        max_lent: the most segments lent at once (None: no bound). Beyond it an
            element is pickled whole instead: a consumer that keeps zero-copy
            arrays alive slows transport down rather than filling /dev/shm.
        on_fallback: called with a message, once, the first time a segment cannot
            be created (shared memory is full, or a file-size limit forbids it);
            that element and each later one that meets the same fate is pickled
            whole instead. None issues the message as a RuntimeWarning here.
    """

    def __init__(
        self,
        *,
        owner_pid: int,
        returns: Any = None,
        min_bytes: int = MIN_BYTES,
        max_lent: int | None = None,
        on_fallback: Callable[[str], None] | None = None,
    ):
        if owner_pid <= 0:
            raise ValueError(f"owner_pid must be a positive process id, got {owner_pid!r}.")
        if returns is not None and not (
            hasattr(returns, "get_nowait")
            or (hasattr(returns, "poll") and hasattr(returns, "recv"))
        ):
            raise TypeError(
                f"`returns` must be a Queue (with get_nowait) or a Connection (with poll "
                f"and recv), got {type(returns).__qualname__}."
            )
        self._state = _PoolState(int(owner_pid))
        self._returns = returns
        self._min_bytes = int(min_bytes)
        self._max_lent = max_lent
        self._on_fallback = on_fallback
        self._fallback_told = False
        self._skeletons: dict[tuple[str, ...], bytes] = {}
        # `empty`'s arrays: by the id of the array (encode looks them up) and by the
        # id of its weak reference (whose callback appends it to `_dead`, in whatever
        # thread drops the array: deque.append, no Python code, as in SegmentReader).
        self._owned: dict[int, _Owned] = {}
        self._owned_refs: dict[int, _Owned] = {}
        self._dead: collections.deque[weakref.ref[Any]] = collections.deque()
        # `empty` runs in reader threads while encode runs in the worker's loop:
        # every change of the segments' bookkeeping holds this lock (copies do not).
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_pool, self._state)

    @property
    def min_bytes(self) -> int:
        """Arrays with fewer bytes are pickled inline rather than put in shared memory."""
        return self._min_bytes

    @min_bytes.setter
    def min_bytes(self, value: int) -> None:
        self._min_bytes = max(1, int(value))

    @property
    def names(self) -> tuple[str, ...]:
        """The names of every segment the pool holds: free, under an array of `empty`, or lent."""
        state = self._state
        free = [segment.name for segments in state.free.values() for segment in segments]
        # Under arrays of `empty` alive here and not lent (those are in `lent`).
        held = [name for name in state.alive if name not in state.lent]
        return (*free, *held, *state.lent)

    @property
    def lent(self) -> int:
        """How many segments are lent (not yet reclaimed)."""
        return len(self._state.lent)

    def encode(self, element: Any) -> Payload:
        """Encodes `element`, lending a segment if it holds large arrays.

        An array that `empty` handed out, whole and not lent yet, is lent in its
        own segment without a copy; every other large array is copied, into the
        free room after such an array when it fits there, else into one segment.

        Example::

            payload = pool.encode({"image": np.zeros((224, 224, 3), np.uint8), "id": 7})
        """
        state = self._state
        if state.closed:
            raise ValueError("This SegmentPool is closed; create a new one to encode.")
        if self._max_lent is not None and len(state.lent) >= self._max_lent:
            with self._lock:
                self._drain()
            if len(state.lent) >= self._max_lent:
                # Every lent segment is still in use: send this element in the pickle.
                return Payload(None, 0, (), _pickle_whole(element))
        found = self._flat_arrays(element)
        if found is not None:
            skeleton, arrays = found
        else:
            buffer = io.BytesIO()
            pickler = _Pickler(buffer, self._min_bytes)
            pickler.dump(element)
            arrays = pickler.arrays
            skeleton = buffer.getvalue()
            if not arrays:
                return Payload(None, 0, (), skeleton)
        if self._owned:  # arrays of `empty` are alive: some may travel in their segment
            return self._encode_own(element, arrays, skeleton)
        leaves = []
        position = _DATA_AT
        for array in arrays:
            position = -(-position // _ALIGN) * _ALIGN
            # Keep Fortran order (a transposed view, say): copying stays linear.
            fortran = array.flags.f_contiguous and not array.flags.c_contiguous
            leaves.append((position, array.shape, array.dtype.str, fortran))
            position += array.nbytes
        with self._lock:
            segment = self._acquire(position)
        if segment is None:  # no room: the pipe carries any element
            return Payload(None, 0, (), _pickle_whole(element))
        try:
            mapping = segment.mapping
            for array, (offset, shape, _, fortran) in zip(arrays, leaves, strict=True):
                target = _view(shape, array.dtype, mapping, offset, fortran)
                np.copyto(target, array)
            del target
        except BaseException:
            with self._lock:
                state.free.setdefault(segment.size, []).append(segment)
            raise
        # Not under the lock: only this thread lends, and a segment it just took from
        # `free` (or made) is in no other thread's hands.
        segment.generation += 1
        _HEADER.pack_into(mapping, 0, _MAGIC, segment.generation)
        state.lent[segment.name] = segment
        return Payload(segment.name, segment.generation, tuple(leaves), skeleton)

    def _encode_own(self, element: Any, arrays: list[np.ndarray], skeleton: bytes) -> Payload:
        """`encode` of an element's `arrays` where some may be arrays of `empty`."""
        state = self._state
        own = self._own_segments(arrays)
        copied = [index for index in range(len(arrays)) if index not in own]
        segment = None  # where the copies go
        if own:
            # The first own array's segment takes the copies too when they fit after it.
            first = next(iter(own))
            host = own[first]
            offsets, end = _layout(arrays, copied, _DATA_AT + arrays[first].nbytes)
            if end <= host.size:
                segment = host
                del own[first]
                offsets[first] = _DATA_AT
        if segment is None and copied:
            offsets, end = _layout(arrays, copied, _DATA_AT)
            with self._lock:
                segment = self._acquire(end)
            if segment is None:  # no room: the pipe carries any element
                return Payload(None, 0, (), _pickle_whole(element))
        leaves = []
        for index, array in enumerate(arrays):
            # Keep Fortran order (a transposed view, say): copying stays linear.
            fortran = array.flags.f_contiguous and not array.flags.c_contiguous
            leaves.append((offsets.get(index, _DATA_AT), array.shape, array.dtype.str, fortran))
        if segment is not None:
            try:
                mapping = segment.mapping
                for index in copied:
                    offset, shape, _, fortran = leaves[index]
                    target = _view(shape, arrays[index].dtype, mapping, offset, fortran)
                    np.copyto(target, arrays[index])
                    del target
            except BaseException:
                if segment.name not in state.alive:
                    with self._lock:
                        state.free.setdefault(segment.size, []).append(segment)
                raise
        with self._lock:
            if segment is not None:
                self._lend(segment)
            lent_own = tuple((index, one.name, self._lend(one)) for index, one in own.items())
        if segment is None:
            return Payload(None, 0, tuple(leaves), skeleton, lent_own)
        return Payload(segment.name, segment.generation, tuple(leaves), skeleton, lent_own)

    def _lend(self, segment: _Segment) -> int:
        """Marks `segment` lent under a new generation (written in its header); returns it."""
        segment.generation += 1
        _HEADER.pack_into(segment.mapping, 0, _MAGIC, segment.generation)
        self._state.lent[segment.name] = segment
        return segment.generation

    def _own_segments(self, arrays: list[np.ndarray]) -> dict[int, _Segment]:
        """Index -> segment of each array of `arrays` that `empty` made, whole and not lent.

        A view of such an array, or one that a later stage replaced, is not found
        here and is copied like any other array.
        """
        lent = self._state.lent
        found = {}
        with self._lock:
            self._settle()
            owned = self._owned
            for index, array in enumerate(arrays):
                entry = owned.get(id(array))
                if entry is not None and entry.whole(array) and entry.segment.name not in lent:
                    found[index] = entry.segment
        return found

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        """An empty C-ordered array over a segment of its own, or None (then use numpy).

        Installed as the worker's batch allocator (`grain_dataset.extension.
        set_batch_allocator`), so that batches are stacked straight into shared
        memory: `encode` then lends the array's segment as it is, without
        copying, if the array reaches it whole. Arrays smaller than
        `empty_min_bytes`, of dtypes the transport copies by pickle, asked for in
        a forked child or after `close` get None. Thread-safe. The segment is
        reused once the array is garbage collected here and (if it was sent)
        released by the parent; `close` unlinks those never sent.

        Example::

            batch = pool.empty((128, 224, 224, 3), np.uint8)
            np.stack(images, out=batch)
            payload = pool.encode(batch)  # no copy: payload.segment is the batch's
        """
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        state = self._state
        if nbytes < self.empty_min_bytes or dtype.kind not in _SHARED_KINDS:
            return None
        if state.closed or os.getpid() != state.pid:
            return None
        with self._lock:
            self._settle()
            if self._max_lent is not None and len(state.alive) >= self._max_lent:
                # Batches read ahead but not sent yet are bounded like lent ones: past
                # that many, numpy's memory, so /dev/shm holds no more than before.
                return None
            segment = self._take_free(_DATA_AT + nbytes)
        if segment is None:
            # No room in /dev/shm: numpy's memory, silently (encode says so if it
            # cannot send the element through shared memory either).
            segment = self._create(_DATA_AT + nbytes, quiet=True)
            if segment is None:
                return None
        count = nbytes // dtype.itemsize
        lease = np.frombuffer(segment.mapping, dtype, count, _DATA_AT)
        array = lease.reshape(shape)
        entry = _Owned(lease, array, segment, self._dead.append)
        del lease
        with self._lock:
            if state.closed:  # closed meanwhile: this segment was never seen by close
                unlink_segment(segment.name)
                return None
            self._owned[entry.key] = entry
            self._owned_refs[id(entry.ref)] = entry
            state.alive[segment.name] = segment
        return array

    @property
    def empty_min_bytes(self) -> int:
        """`empty` declines smaller arrays: a segment of their own would be mostly unused."""
        return max(self._min_bytes, MIN_SEGMENT_BYTES // 2)

    def _settle(self) -> None:
        """Frees the segments of `empty`'s arrays that died here and are not lent (lock held)."""
        dead, state = self._dead, self._state
        while dead:
            entry = self._owned_refs.pop(id(dead.popleft()))
            if self._owned.get(entry.key) is entry:  # the id may be a newer array's by now
                del self._owned[entry.key]
            segment = entry.segment
            state.alive.pop(segment.name, None)
            if segment.name not in state.lent and not state.closed:
                state.free.setdefault(segment.size, []).append(segment)

    def _fell_back(self, error: OSError, nbytes: int) -> None:
        if self._fallback_told:
            return
        self._fallback_told = True
        message = (
            f"Shared memory could not take an element's {nbytes} bytes of arrays, so "
            "elements that do not fit travel pickled through the pipe instead, which is "
            f"slower. {error}"
        )
        if self._on_fallback is None:
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        else:
            self._on_fallback(message)

    def _flat_arrays(self, element: Any) -> tuple[bytes, list[np.ndarray]] | None:
        """The skeleton and arrays of one array or a flat str-keyed dict of arrays.

        The most common elements skip the pickler (a third of the encoding time
        for a 150 KB array); their skeletons are cached per key set. Anything
        else, or an array too small or of another kind, returns None.
        """
        kinds, min_bytes = _SHARED_KINDS, self._min_bytes
        if type(element) is np.ndarray:
            if element.dtype.kind in kinds and element.nbytes >= min_bytes:
                return _SINGLE_SKELETON, [element]
            return None
        if type(element) is not dict or not 0 < len(element) <= _MAX_FLAT_KEYS:
            return None
        arrays = list(element.values())
        for array in arrays:
            if not (
                type(array) is np.ndarray
                and array.dtype.kind in kinds
                and array.nbytes >= min_bytes
            ):
                return None
        if len({id(array) for array in arrays}) != len(arrays):
            return None  # the pickler keeps one array shared by two keys shared
        keys = tuple(element)
        skeleton = self._skeletons.get(keys)
        if skeleton is None:
            if not all(type(key) is str for key in keys):
                return None
            skeleton = pickle.dumps(
                {key: _Placeholder(i) for i, key in enumerate(keys)}, pickle.HIGHEST_PROTOCOL
            )
            if len(self._skeletons) < _MAX_FLAT_KEYS:
                self._skeletons[keys] = skeleton
        return skeleton, arrays

    def reclaim(self, name: str | Iterable[str]) -> None:
        """Takes back a released segment (or several) for reuse.

        Example::

            pool.reclaim(name_from_parent)

        Raises:
            ValueError: the name is not lent by this pool (released twice?).
        """
        with self._lock:
            self._reclaim(name)

    def _reclaim(self, name: str | Iterable[str]) -> None:
        """`reclaim`, with the lock held."""
        state = self._state
        if state.closed:
            return  # closing already settled every segment
        for one in [name] if isinstance(name, str) else name:
            segment = state.lent.pop(one, None)
            if segment is None:
                raise ValueError(
                    f"Segment {one!r} is not lent by this SegmentPool: it was released "
                    f"twice, or belongs to another worker. Release each payload's "
                    f"segment once, to the pool that encoded it."
                )
            # Under an array of `empty` still alive here: free once it dies (`_settle`).
            if one not in state.alive:
                state.free.setdefault(segment.size, []).append(segment)

    def _drain(self) -> None:
        """Takes back the names waiting on `returns` (lock held)."""
        returns = self._returns
        if returns is None:
            return
        if hasattr(returns, "get_nowait"):
            while True:
                try:
                    item = returns.get_nowait()
                except queue.Empty:
                    return
                self._reclaim(item)
        else:
            while returns.poll():
                self._reclaim(returns.recv())

    def _acquire(self, nbytes: int) -> _Segment | None:
        """A free segment of `nbytes` or more, else a new one; None if none can be made."""
        segment = self._take_free(nbytes)
        return self._create(nbytes) if segment is None else segment

    def _take_free(self, nbytes: int) -> _Segment | None:
        """A free segment of `nbytes` or more (lock held), None if there is none."""
        free = self._state.free.setdefault(_size_class(nbytes), [])
        if not free:
            self._drain()
        return free.pop() if free else None

    def _create(self, nbytes: int, quiet: bool = False) -> _Segment | None:
        """A new segment of `nbytes` or more; None if none can be made (said once unless quiet)."""
        size = _size_class(nbytes)
        try:
            name, mapping = create_unique_segment(size, self._state.owner_pid)
        except OSError as error:  # a full /dev/shm, a file-size limit (see the module doc)
            if not quiet:
                self._fell_back(error, nbytes)
            return None
        return _Segment(name, size, mapping)

    def close(self) -> None:
        """Unlinks the free segments (after taking back returned ones); idempotent.

        Lent segments stay for the parent to decode (it unlinks them), unless the
        parent is dead, in which case they are unlinked too.
        """
        if self._state.closed:
            return
        with self._lock:
            # A parent that went away may leave the channel broken: close regardless.
            with contextlib.suppress(EOFError, OSError, ValueError):
                self._drain()
            self._finalizer()

    def __enter__(self) -> SegmentPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = self._state
        free = sum(map(len, state.free.values()))
        closed = ", closed" if state.closed else ""
        lent = len(state.lent)
        return f"SegmentPool(owner_pid={state.owner_pid}, free={free}, lent={lent}{closed})"
