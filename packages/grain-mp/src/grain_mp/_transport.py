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

import contextlib
import io
import mmap
import pickle
import struct
from typing import Any, NamedTuple

import numpy as np

from grain_mp._shm_array import SharedMemoryArray

__all__ = ["MIN_BYTES", "MIN_SEGMENT_BYTES", "Payload"]

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


def _check_generation(mapping: mmap.mmap, name: str, expected: int) -> None:
    magic, generation = _HEADER.unpack_from(mapping, 0)
    if magic != _MAGIC or generation != expected:
        raise RuntimeError(
            f"Shared memory segment {name!r} now holds generation "
            f"{generation}, not the payload's {expected}: it was lent again "
            f"before this payload was decoded. Release a segment only after decoding "
            f"its payload, and only once."
        )
