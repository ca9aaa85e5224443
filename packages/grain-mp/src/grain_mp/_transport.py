"""Moving elements from a worker process to its parent through reused shared memory.

Model. A worker encodes each element with its `SegmentPool`: the element is
pickled, except that every numpy array of a numeric, bool or datetime dtype with
at least `min_bytes` bytes is replaced by a placeholder and copied (one copy per
array) into ONE shared memory segment for the whole element, the arrays back to
back at 64-byte aligned offsets after a 64-byte header. Everything else (strings,
objects, None, small arrays, the containers) stays in the pickle, in full. The
result is a small picklable `Payload` (segment name, generation, the arrays'
offsets/shapes/dtypes, the pickled skeleton) that goes through any Queue or Pipe.
In the parent, `SegmentReader.decode` copies the arrays out of the segment into
fresh numpy arrays (one copy each) and unpickles the skeleton around them.

Batches stacked in place. A worker installs `SegmentPool.empty` as the batch
allocator (`grain_dataset.extension.set_batch_allocator`): the default batch_fn
stacks each large array of a batch (at least `empty_min_bytes`) straight into a
fresh segment of its own, the array at the data offset. When such an array
reaches `encode` whole (the very array, its shape and dtype unchanged, not lent
yet), its segment is lent as it is: no copy. The element's other arrays are
copied into the room left after it when they fit (one segment for the element,
as usual), else into a segment of their own; `Payload.own` lists the arrays of
further such segments. A view of the batch, or an array a later stage made
instead, is copied like any array. Such a segment returns to the pool only once
both sides let go of it: the parent released it and the worker's array (with
every view of it) was garbage collected, so the worker's code never sees its
batch rewritten. One never sent (a filter dropped the batch, an error) returns
when its array dies, and `close` unlinks those still alive. A user's stage that
keeps a batch and writes into it after yielding it would change what the parent
reads; without workers it would change what the consumer holds just the same.

Reuse. Segments are not created and unlinked per element. The pool *lends* a
segment with each payload; once the parent has decoded it, the segment is free
again and its name goes back to the worker (the reader hands it to the
`release` callback you give it, e.g. ``return_queue.put``, or keeps it for
`SegmentReader.take_released`); the worker's pool takes it back with
`SegmentPool.reclaim`, or by itself from the `returns` channel it polls before
allocating. Segments come in power-of-two size classes of at least 1 MiB, so the
pool holds about as many segments as there are elements in flight (bound those
with credits, as mp_prefetch does: a worker running ahead unchecked keeps
creating segments). The reader
keeps each segment mapped after its first use, so reuse costs no system call.
Each lending bumps a generation number, written into the segment's header and
the payload: decoding a payload whose segment was lent again (released twice, or
released before decoding) raises instead of returning another element's data.

No room. When a segment cannot be created (a full /dev/shm, a file-size limit:
`grain_mp._sweep.create_segment` unlinks what it half made and says which), the
element is pickled whole instead, as past `max_lent`: the pipe carries anything,
only slower. The pool says so once (`on_fallback`, or a RuntimeWarning) and
tries shared memory again for each later element, so a /dev/shm that empties
again is used again.

Ownership (who unlinks; no resource tracker is involved, see `grain_mp._sweep`):

- Segment names carry the *parent's* pid as owner (``SegmentPool(owner_pid=...)``)
  and the worker's pid as creator.
- The worker's `SegmentPool.close()` (call it in a ``finally``: multiprocessing
  workers skip interpreter-exit hooks) unlinks the segments it holds free,
  after taking back the names waiting on `returns`. Segments still lent stay,
  because the parent may not have decoded them yet (a worker that ran out of
  data ends before its parent reads its last elements); if the parent is gone,
  it unlinks those too.
- The parent's `SegmentReader.close()` unlinks every segment name it has seen,
  lent or returned (idempotent: names already gone are skipped), and with
  ``creator_pids=`` every segment those (stopped) workers created for it, also
  the ones never sent: this is the cleanup after a worker is SIGKILLed.
- If only the parent dies, a worker that notices and closes its pool unlinks
  everything. If the whole process group is SIGKILLed, `sweep_dead_segments()`
  at the next pipeline start removes the segments, since their owner is dead.

Example::

    # worker                                     # parent
    pool = SegmentPool(owner_pid=parent_pid,     reader = SegmentReader(release=returns.put)
                       returns=returns)          element = reader.decode(data.get())
    try:                                         ...
        for element in pipeline:                 reader.close(creator_pids=[worker.pid])
            data.put(pool.encode(element))
    finally:
        pool.close()
"""

from __future__ import annotations

import collections
import contextlib
import io
import math
import mmap
import os
import pickle
import queue
import struct
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from grain_mp._shm_array import SharedMemoryArray
from grain_mp._sweep import (
    attach_segment,
    create_unique_segment,
    process_alive,
    remove_segments,
    unlink_segment,
)

__all__ = ["MIN_BYTES", "MIN_SEGMENT_BYTES", "Payload", "SegmentPool", "SegmentReader"]

MIN_BYTES = 4096
"""Arrays smaller than this many bytes are pickled inline: a memcpy is not worth a slot."""

MIN_SEGMENT_BYTES = 1 << 20
"""The smallest segment size class; larger classes are powers of two."""

_ALIGN = 64  # a cache line; also satisfies every dtype's alignment
_HEADER = struct.Struct("<8sQ")  # magic, generation
_MAGIC = b"GRAINTX1"
_DATA_AT = 64
# Plain fixed-size values whose bytes mean the same in any process.
_SHARED_KINDS = frozenset("biufcmM")
# Mappings a reader keeps; the oldest are dropped beyond this (segments of ended workers).
_MAX_MAPPINGS = 256


class Payload(NamedTuple):
    """One encoded element: small and picklable; the arrays' data is in `segment`.

    Attributes:
        segment: the segment holding the arrays copied in, or None if there are
            none (then only the segments of `own`, if any, are lent).
        generation: which lending of `segment` this payload belongs to.
        leaves: ``(offset, shape, dtype string, Fortran order)`` of each array.
        skeleton: the element pickled with the arrays replaced by placeholders.

    Example::

        payload = pool.encode({"image": image, "label": 3})
        payload.segment, len(payload.leaves)  # ('grain_...', 1)
    """

    segment: str | None
    generation: int
    leaves: tuple[tuple[int, tuple[int, ...], str, bool], ...]
    skeleton: bytes
    own: tuple[tuple[int, str, int], ...] = ()
    """``(leaf index, segment, generation)`` of each array that was stacked straight
    into a segment of its own (`SegmentPool.empty`): that leaf's offset is in that
    segment, not in `segment`."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every segment the payload lends (released each on its own)."""
        if not self.own:  # the common case, on every element's way
            return () if self.segment is None else (self.segment,)
        own = tuple(name for _, name, _ in self.own)
        return own if self.segment is None else (self.segment, *own)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A NamedTuple pickles through copyreg and __getnewargs__, Python calls per
        # payload that made pickling a worker's group of 8 elements cost 14 us; its
        # fields and one function cost a third of that.
        return _payload, tuple(self)


def _payload(
    segment: str | None,
    generation: int,
    leaves: tuple[tuple[int, tuple[int, ...], str, bool], ...],
    skeleton: bytes,
    own: tuple[tuple[int, str, int], ...] = (),
) -> Payload:
    """Unpickles a `Payload` (see `Payload.__reduce__`)."""
    return Payload(segment, generation, leaves, skeleton, own)


def _view(shape: Any, dtype: Any, buffer: Any, offset: int, fortran: bool) -> np.ndarray:
    """An array over `buffer` at `offset`, in Fortran or C order."""
    if fortran:
        return np.ndarray(shape, dtype, buffer, offset, order="F")
    # No `order` keyword for C order: parsing it costs as much as the array.
    return np.ndarray(shape, dtype, buffer, offset)


def _same(value: Any) -> Any:
    """Unpickles as its argument: a SharedMemoryArray sent as the plain array of its values."""
    return value


def _leaf(index: int) -> Any:
    """Stands for array `index` of a payload; only `SegmentReader.decode` resolves it."""
    raise pickle.UnpicklingError(
        "This is a transport payload's skeleton: decode the Payload with "
        "SegmentReader.decode instead of unpickling its skeleton directly."
    )


class _ValuePickler(pickle.Pickler):
    """Pickles an element whole, SharedMemoryArrays by value."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)

    def reducer_override(self, obj: Any) -> Any:
        # Called for every object except exact ints, floats, strs, bytes, lists,
        # tuples, dicts, sets, None and bools, so plain data costs no Python call.
        if isinstance(obj, SharedMemoryArray):
            # It would pickle by reference, but the worker's array (and with it the
            # segment) may be gone before the consumer reads: send its values instead.
            return _same, (obj.view(np.ndarray),)
        return NotImplemented


def _pickle_whole(element: Any) -> bytes:
    buffer = io.BytesIO()
    _ValuePickler(buffer).dump(element)
    return buffer.getvalue()


class _Pickler(_ValuePickler):
    """Pickles an element, setting large plain arrays aside for the segment."""

    def __init__(self, file: io.BytesIO, min_bytes: int) -> None:
        super().__init__(file)
        self.min_bytes = min_bytes
        self.arrays: list[np.ndarray] = []

    def reducer_override(self, obj: Any) -> Any:
        # Exact ndarray only: subclasses may carry state a reconstruction would lose.
        if type(obj) is np.ndarray:
            if obj.dtype.kind in _SHARED_KINDS and obj.nbytes >= self.min_bytes:
                self.arrays.append(obj)
                # The pickler memoizes the array: the same array twice in an element
                # is stored once and decodes to one shared array again.
                return _leaf, (len(self.arrays) - 1,)
            return NotImplemented
        # A SharedMemoryArray becomes the plain array of its values (which may then
        # go to the segment like any other).
        return super().reducer_override(obj)


class _Placeholder:
    """Pickles as array `index` of a payload: the skeletons of the fast path."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return _leaf, (self.index,)


_SINGLE_SKELETON = pickle.dumps(_Placeholder(0), pickle.HIGHEST_PROTOCOL)
# Flat dicts the fast path takes (and skeletons it caches): training examples have a few keys.
_MAX_FLAT_KEYS = 64


class _Unpickler(pickle.Unpickler):
    """Unpickles a skeleton, resolving placeholders to the decoded arrays."""

    def __init__(self, file: io.BytesIO, arrays: list[np.ndarray]) -> None:
        super().__init__(file)
        self.arrays = arrays

    def find_class(self, module: str, name: str) -> Any:
        if name == "_leaf" and module == __name__:
            return self.arrays.__getitem__
        return super().find_class(module, name)


def _layout(arrays: list[np.ndarray], indices: list[int], start: int) -> tuple[dict[int, int], int]:
    """Offsets of `arrays[i]` for i in `indices`, back to back and aligned from `start`; the end."""
    offsets = {}
    position = start
    for index in indices:
        position = -(-position // _ALIGN) * _ALIGN
        offsets[index] = position
        position += arrays[index].nbytes
    return offsets, position


def _size_class(nbytes: int) -> int:
    return max(MIN_SEGMENT_BYTES, 1 << (nbytes - 1).bit_length())


def _close_mapping(mapping: mmap.mmap) -> None:
    # Arrays still viewing the mapping (zero-copy decodes) make close() refuse;
    # dropping our reference then unmaps it when the last of them dies.
    with contextlib.suppress(BufferError):
        mapping.close()


class _Segment:
    __slots__ = ("generation", "mapping", "name", "size")

    def __init__(self, name: str, size: int, mapping: mmap.mmap) -> None:
        self.name = name
        self.size = size
        self.mapping = mapping
        self.generation = 0


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


class _ReaderState:
    __slots__ = ("closed", "mappings", "pid", "seen")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.mappings: dict[str, mmap.mmap] = {}
        self.seen: set[str] = set()
        self.closed = False


def _close_reader(state: _ReaderState) -> None:
    if state.closed:
        return
    state.closed = True
    for mapping in state.mappings.values():
        _close_mapping(mapping)
    state.mappings.clear()
    # As in the pool: an inherited copy in a forked child unlinks nothing.
    if os.getpid() == state.pid:
        for name in state.seen:
            unlink_segment(name)


class SegmentReader:
    """The parent side: decodes payloads from any number of `SegmentPool` workers.

    Not thread-safe: decode from one thread at a time.

    Example::

        reader = SegmentReader(release=lambda name: returns.put(name))
        element = reader.decode(payload)   # fresh arrays; the segment is released
        view = reader.decode(payload2, copy=False)  # views; released when they die
        reader.close(creator_pids=[worker.pid])

    Args:
        release: called with a segment's name once it is free again (in `decode`
            for copies; for views, at the next `decode`, `take_released` or
            `close` after they died). None keeps the names for `take_released`.
    """

    def __init__(self, release: Callable[[str], None] | None = None) -> None:
        self._release = release
        self._ready: list[str] = []
        # The zero-copy leases alive, by the id of their weak reference: (that
        # reference, the segment's name). Only the decoding thread touches it.
        self._leases: dict[int, tuple[weakref.ref[Any], str]] = {}
        # The weak references of dead leases, appended by the reference's own
        # callback in whatever thread drops the last view. The callback is
        # deque.append itself, no Python function: no bytecode runs there, so a
        # signal (Ctrl-C) that arrives meanwhile raises KeyboardInterrupt in the
        # consumer's code, where it propagates, and not in a weakref callback,
        # where Python would print it as ignored and iteration would go on
        # (weakref.finalize's __call__ is Python code). deque.append is atomic and
        # takes no lock that the thread may already hold, unlike putting on a
        # multiprocessing Queue there.
        self._dead: collections.deque[weakref.ref[Any]] = collections.deque()
        self._state = _ReaderState()
        self._finalizer = weakref.finalize(self, _close_reader, self._state)

    @property
    def seen(self) -> frozenset[str]:
        """The names of every segment this reader has decoded from."""
        return frozenset(self._state.seen)

    def decode(self, payload: Payload, *, copy: bool = True) -> Any:
        """The element `payload` encodes.

        With ``copy=True`` (the default) the arrays are fresh numpy arrays and
        the segment is released before this returns. With ``copy=False`` they are
        writable views of the segment, which is released only once all of them
        have been garbage collected: fast, but the worker needs more segments
        while you hold on to them.

        Raises:
            RuntimeError: the segment was lent again before this payload was
                decoded (a release-protocol bug).
            FileNotFoundError: the segment is gone.
        """
        state = self._state
        if state.closed:
            raise ValueError("This SegmentReader is closed; create a new one to decode.")
        self._deliver()
        name = payload.segment
        if payload.own:
            arrays = self._own_arrays(payload, copy)
        elif name is None:
            return _Unpickler(io.BytesIO(payload.skeleton), []).load()
        else:
            arrays = self._arrays(name, payload.generation, payload.leaves, copy)
        if payload.skeleton == _SINGLE_SKELETON:
            return arrays[0]
        return _Unpickler(io.BytesIO(payload.skeleton), arrays).load()

    def _arrays(
        self,
        name: str,
        generation: int,
        leaves: Iterable[tuple[int, tuple[int, ...], str, bool]],
        copy: bool,
    ) -> list[np.ndarray]:
        """The arrays at `leaves` of segment `name`, lent under `generation`: copies or views."""
        mapping = self._mapping(name)
        _check_generation(mapping, name, generation)
        if copy:
            arrays = [
                np.ndarray(shape, dtype, mapping, offset, order="F" if fortran else "C").copy(
                    order="K"
                )
                for offset, shape, dtype, fortran in leaves
            ]
            # Had the worker rewritten the segment meanwhile, the copies would mix elements.
            _check_generation(mapping, name, generation)
            self._released(name)
            return arrays
        # Every view's base is this lease (numpy collapses view chains onto the
        # first array whose base is not an array), so its weak reference's
        # callback runs exactly when the last view of this segment dies.
        lease = np.frombuffer(mapping, np.uint8)
        arrays = [
            _view(shape, dtype, lease, offset, fortran) for offset, shape, dtype, fortran in leaves
        ]
        reference = weakref.ref(lease, self._dead.append)
        self._leases[id(reference)] = (reference, name)
        return arrays

    def _own_arrays(self, payload: Payload, copy: bool) -> list[np.ndarray]:
        """The arrays of a payload that lends several segments (`Payload.own`), in order."""
        leaves = payload.leaves
        arrays: list[Any] = [None] * len(leaves)
        own = {index for index, _, _ in payload.own}
        for index, name, generation in payload.own:
            (arrays[index],) = self._arrays(name, generation, [leaves[index]], copy)
        rest = [index for index in range(len(leaves)) if index not in own]
        if payload.segment is not None:
            found = self._arrays(
                payload.segment, payload.generation, [leaves[i] for i in rest], copy
            )
            for index, array in zip(rest, found, strict=True):
                arrays[index] = array
        return arrays

    def take_released(self) -> list[str]:
        """The names released since the last call (only without a `release` callback).

        Example::

            element = reader.decode(payload)
            credits.send(reader.take_released())  # [payload.segment]
        """
        self._deliver()
        ready, self._ready = self._ready, []
        return ready

    def _released(self, name: str) -> None:
        if self._release is None:
            self._ready.append(name)
        else:
            self._release(name)

    def _deliver(self) -> None:
        dead, leases = self._dead, self._leases
        while dead:
            _, name = leases.pop(id(dead.popleft()))
            self._released(name)

    def _mapping(self, name: str) -> mmap.mmap:
        state = self._state
        mappings = state.mappings
        mapping = mappings.pop(name, None)
        if mapping is None:
            try:
                mapping = attach_segment(name)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"Shared memory segment {name!r} is gone before its payload was "
                    f"decoded: its worker's pool was closed while the parent was gone, "
                    f"or a reader closed it. Decode payloads before closing the reader."
                ) from None
            state.seen.add(name)
            if len(mappings) >= _MAX_MAPPINGS:
                _close_mapping(mappings.pop(next(iter(mappings))))
        mappings[name] = mapping  # most recently used last
        return mapping

    def close(self, *, creator_pids: Iterable[int] = ()) -> None:
        """Drops all mappings and unlinks every segment seen; idempotent.

        Call it once the workers have stopped. ``creator_pids`` (the workers'
        pids) also removes the segments they created for this process but never
        sent, e.g. after a worker was SIGKILLed. Views from ``copy=False`` decodes
        stay valid.
        """
        self._finalizer()
        for pid in creator_pids:
            remove_segments(pid)

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = self._state
        closed = ", closed" if state.closed else ""
        return f"SegmentReader(mapped={len(state.mappings)}, seen={len(state.seen)}{closed})"


def _check_generation(mapping: mmap.mmap, name: str, expected: int) -> None:
    magic, generation = _HEADER.unpack_from(mapping, 0)
    if magic != _MAGIC or generation != expected:
        raise RuntimeError(
            f"Shared memory segment {name!r} now holds generation "
            f"{generation}, not the payload's {expected}: it was lent again "
            f"before this payload was decoded. Release a segment only after decoding "
            f"its payload, and only once."
        )
