"""`SharedMemoryArray`: a numpy array in a POSIX shared memory segment, with explicit ownership.

Model. ``SharedMemoryArray(shape, dtype)`` creates a segment (named as in
`grain_mp._sweep`) and is a numpy array over its pages; every numpy operation
works on it in place. Its `metadata` (name, shape, dtype) is a small picklable
value: another process turns it back into an array over the same pages with
`SharedMemoryArray.from_metadata`, without copying and without registering with
a resource tracker (which would unlink the segment when *that* process exits).

Mappings and names are separate. A process's mapping lives as long as the array
or any view of it does (unmapping earlier would leave them pointing at freed
memory), so using an array is always safe; a view keeps its array alive, so an
owner is collected (and unlinks) only after its views. Unlinking removes only the *name*:
processes that have attached keep their pages, later attaches fail.

Who unlinks (at most one object, and only in the process that made it so):

====================================================  ===========================================
handle                                                unlinks the segment
====================================================  ===========================================
the array ``SharedMemoryArray(...)`` returned         when it is garbage collected, when the
                                                      interpreter exits, or on `unlink()`;
                                                      never once `close()` handed it off
an array from `from_metadata`                         only after `unlink_on_del()` (then when it
                                                      is garbage collected or at exit), or on
                                                      `unlink()`
an unpickled array (`pickle` shares by reference)     only after `unlink_on_del()`, or on
                                                      `unlink()`, as for `from_metadata`
views, results of arithmetic, copies (`copy.copy`,    never
`copy.deepcopy`: plain in-memory arrays), a forked
child's copy
nobody (the owner was killed)                         `sweep_dead_segments`, once the process
                                                      `owner_pid` is gone
====================================================  ===========================================

Pickling is by reference, as in Grain: the pickle holds the segment's name and
where in it the array lies (so a view pickles as that view), never the values.
Unpickling, in this process or another, attaches to the same pages: writes
through either array are seen through the other. The unpickled array owns
nothing, so the segment must still exist when it is unpickled: keep the owner
alive until then, or `close()` it and let the receiver `unlink_on_del()`.
Arrays whose memory is not in a segment (arithmetic results) pickle as plain
numpy arrays. Our worker processes' transport is the exception: an element
that is (or holds) a SharedMemoryArray arrives in the consumer as a plain copy,
because the worker's array may be gone (and its segment unlinked) before the
consumer reads it.

Handing an array to another process::

    # in the worker
    array = SharedMemoryArray((2, 3), "f4", owner_pid=parent_pid)
    array[:] = ...
    queue.put(array.metadata)
    array.close()  # it no longer unlinks

    # in the parent
    received = SharedMemoryArray.from_metadata(queue.get())
    received.unlink_on_del()  # the parent owns it now

``owner_pid=parent_pid`` makes the sweep keep the segment while the parent lives,
even once the worker is gone.

Grain's interop. `from_shared_memory(shm, shape, dtype)` makes an array over a
`multiprocessing.shared_memory.SharedMemory` someone else created: the array
maps the segment itself, keeps `shm` (as `.shm`) and closes it when the array
and its views are gone; it unlinks only after `unlink_on_del()` (or on
`unlink()`), through ``shm.unlink()`` so that multiprocessing's resource tracker
forgets the name too. `enable_async_del()` moves the unlinking and closing that
garbage collection does to background threads (the collecting thread then does
not wait on the kernel), with at most `max_outstanding_requests` queued: past
that, collection waits for room. `close_shm_async(shm, unlink)` closes (and
unlinks) a SharedMemory the same way; without `enable_async_del` both happen at
once in the calling thread. At interpreter exit, and in forked children, they
always happen at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import operator
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import shared_memory
from typing import Any, SupportsIndex

import numpy as np

from grain_mp._sweep import attach_segment, create_unique_segment, unlink_segment

__all__ = ["SharedMemoryArray", "SharedMemoryArrayMetadata"]


def _as_shape(shape: SupportsIndex | Iterable[SupportsIndex]) -> tuple[int, ...]:
    try:
        dims: tuple[int, ...] = (operator.index(shape),)  # type: ignore[arg-type]
    except TypeError:
        dims = tuple(operator.index(dim) for dim in shape)  # type: ignore[union-attr]
    if any(dim < 0 for dim in dims):
        raise ValueError(
            f"'size' must be a positive integer: a shape needs non-negative dimensions, got {dims}."
        )
    return dims


def _as_dtype(dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(
            f"dtype {dtype} holds Python objects, which cannot live in shared memory "
            f"(they are pointers into one process's heap). Use a numeric, bool or "
            f"fixed-width string dtype, or send such values by pickling."
        )
    return dtype


@dataclasses.dataclass(frozen=True)
class SharedMemoryArrayMetadata:
    """What another process needs to attach a `SharedMemoryArray`: picklable and small.

    Example::

        meta = SharedMemoryArray((2, 3), np.float32).metadata
        meta  # SharedMemoryArrayMetadata(name='grain_...', shape=(2, 3), dtype=dtype('float32'))
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self) -> None:
        # Frozen: normalize through object.__setattr__ so that equal metadata compare equal.
        object.__setattr__(self, "shape", _as_shape(self.shape))
        object.__setattr__(self, "dtype", _as_dtype(self.dtype))

    @property
    def nbytes(self) -> int:
        """The size of the array's data in bytes."""
        return math.prod(self.shape) * self.dtype.itemsize


class _Ownership:
    """Whether (and in which process) an array unlinks its segment; its finalizer holds this."""

    __slots__ = ("name", "owns", "pid", "shm", "unlinked")

    def __init__(self, name: str, owns: bool, shm: shared_memory.SharedMemory | None) -> None:
        self.name = name
        self.owns = owns
        self.pid = os.getpid()
        self.unlinked = False
        # The SharedMemory of `from_shared_memory`: closed at the end, unlinked through it.
        self.shm = shm


def _unlink(ownership: _Ownership) -> None:
    if ownership.shm is not None:
        with contextlib.suppress(FileNotFoundError):
            ownership.shm.unlink()  # tells multiprocessing's resource tracker too
    else:
        unlink_segment(ownership.name)


def _close_shm(shm: shared_memory.SharedMemory, unlink: bool) -> None:
    # BufferError: the caller still exports shm.buf; its mapping then ends with its last view.
    with contextlib.suppress(BufferError):
        shm.close()
    if unlink:
        with contextlib.suppress(FileNotFoundError):
            shm.unlink()


_in_deleter = threading.local()


def _mark_deleter_thread() -> None:
    _in_deleter.active = True


class _AsyncDeleter:
    """The background threads of `enable_async_del`, in the process that enabled them."""

    def __init__(self, num_threads: int, max_outstanding: int) -> None:
        self.pid = os.getpid()
        self.pool = ThreadPoolExecutor(
            num_threads, thread_name_prefix="grain-shm-del", initializer=_mark_deleter_thread
        )
        self.room = threading.BoundedSemaphore(max_outstanding)

    def submit(self, task: Callable[[], None]) -> bool:
        """Runs `task` in the background; False if it cannot (the caller runs it)."""
        if os.getpid() != self.pid:
            return False  # a forked child: the threads are the parent's
        if getattr(_in_deleter, "active", False):
            return False  # collected in a deleter thread: waiting for room could deadlock
        self.room.acquire()
        try:
            future = self.pool.submit(task)
        except RuntimeError:  # the interpreter is shutting down
            self.room.release()
            return False
        future.add_done_callback(lambda _: self.room.release())
        return True


_deleter: _AsyncDeleter | None = None


def _run(task: Callable[[], None]) -> None:
    deleter = _deleter
    if deleter is None or not deleter.submit(task):
        task()


def _release(ownership: _Ownership, unlink: bool) -> None:
    if ownership.shm is not None:
        _close_shm(ownership.shm, False)
    if unlink:
        _unlink(ownership)


def _finish(ownership: _Ownership) -> None:
    """Runs when the array is garbage collected or at interpreter exit."""
    # A forked child inherits the owner's objects, finalizers included: only the
    # process that took ownership may unlink.
    unlink = ownership.owns and not ownership.unlinked and os.getpid() == ownership.pid
    if unlink:
        ownership.unlinked = True
    if unlink or ownership.shm is not None:
        _run(functools.partial(_release, ownership, unlink))


class SharedMemoryArray(np.ndarray):
    """A numpy array backed by a new POSIX shared memory segment.

    The creating array owns the segment and unlinks it when it is garbage
    collected (or at interpreter exit) unless `close()` hands it off; attached
    arrays (`from_metadata`) unlink only after `unlink_on_del()` or on `unlink()`.
    See the module docstring for the full table. Views and arithmetic results are
    arrays over the same or new memory that own nothing (a view keeps the owning
    array, and so the segment, alive). Pickling shares by reference: the
    unpickled array (or view) maps the same pages and owns nothing; `copy.copy`
    and `copy.deepcopy` yield a plain numpy copy.

    Example::

        array = SharedMemoryArray((2, 3), dtype=np.int32)
        array[:] = 7
        other = SharedMemoryArray.from_metadata(array.metadata)  # e.g. in a worker
        other[0, 0] = 1  # array[0, 0] == 1 too
        array.unlink()

    Args:
        shape: the array's shape (an int or a sequence of ints).
        dtype: any numpy dtype without Python objects; float64 by default.
        owner_pid: the process whose death makes the segment garbage, for
            `sweep_dead_segments`; this process by default. Pass the receiving
            process's pid when the segment is handed to it.
    """

    _metadata: SharedMemoryArrayMetadata | None
    _ownership: _Ownership | None

    def __new__(
        cls,
        shape: SupportsIndex | Iterable[SupportsIndex],
        dtype: Any = float,
        *,
        owner_pid: int | None = None,
    ) -> SharedMemoryArray:
        dtype = _as_dtype(dtype)
        shape = _as_shape(shape)
        nbytes = math.prod(shape) * dtype.itemsize
        name, mapping = create_unique_segment(nbytes, owner_pid)
        try:
            # The array's base is the mmap: the pages stay mapped while it or a view lives.
            array = super().__new__(cls, shape, dtype, buffer=mapping)
            array._adopt(SharedMemoryArrayMetadata(name, shape, dtype), owns=True)
        except BaseException:
            unlink_segment(name)
            raise
        return array

    def __array_finalize__(self, obj: Any) -> None:
        # Views, slices and arithmetic results describe other memory (or a part of
        # it): they carry neither metadata nor ownership.
        self._metadata = None
        self._ownership = None

    def _adopt(
        self,
        metadata: SharedMemoryArrayMetadata,
        owns: bool,
        shm: shared_memory.SharedMemory | None = None,
    ) -> None:
        ownership = _Ownership(metadata.name, owns, shm)
        self._metadata = metadata
        self._ownership = ownership
        # Holds only `ownership`, never the array, so that it cannot keep it alive;
        # runs at garbage collection, or at exit (finalize's atexit) if still alive.
        weakref.finalize(self, _finish, ownership)

    @classmethod
    def from_metadata(cls, metadata: SharedMemoryArrayMetadata) -> SharedMemoryArray:
        """Attaches to the segment `metadata` describes: an array over the same pages.

        The attached array does not own the segment: call `unlink_on_del()` to make
        it responsible, or `unlink()`. Nothing is registered with a resource tracker.

        Example::

            received = SharedMemoryArray.from_metadata(queue.get())
            received.unlink_on_del()

        Raises:
            FileNotFoundError: the segment is gone (its owner unlinked it).
            ValueError: the segment is smaller than `metadata` says.
        """
        if not isinstance(metadata, SharedMemoryArrayMetadata):
            raise TypeError(
                f"from_metadata takes a SharedMemoryArrayMetadata (an array's "
                f".metadata), got {type(metadata).__qualname__}."
            )
        try:
            mapping = attach_segment(metadata.name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"Shared memory segment {metadata.name!r} no longer exists: its owner "
                f"unlinked it (e.g. the creating SharedMemoryArray was garbage "
                f"collected while it still owned the segment). The creator should "
                f"call close() after sending .metadata to hand the segment over, and "
                f"the receiver unlink_on_del()."
            ) from None
        if len(mapping) < metadata.nbytes:
            size = len(mapping)
            mapping.close()
            raise ValueError(
                f"Shared memory segment {metadata.name!r} holds {size} bytes, fewer "
                f"than the {metadata.nbytes} of a {metadata.shape} {metadata.dtype} "
                f"array: the metadata does not belong to this segment."
            )
        array = np.ndarray.__new__(cls, metadata.shape, metadata.dtype, buffer=mapping)
        array._adopt(metadata, owns=False)
        return array

    @classmethod
    def from_shared_memory(
        cls,
        shm: shared_memory.SharedMemory,
        shape: SupportsIndex | Iterable[SupportsIndex],
        dtype: Any,
    ) -> SharedMemoryArray:
        """An array of `shape` and `dtype` over the pages of `shm` (a ``SharedMemory``).

        The array maps the segment itself and keeps `shm` (``array.shm``), which it
        closes once the array and its views are garbage collected. Like an array
        from `from_metadata`, it unlinks the segment only after `unlink_on_del()`
        (or on `unlink()`), through ``shm.unlink()``.

        Example::

            shm = multiprocessing.shared_memory.SharedMemory(create=True, size=64)
            array = SharedMemoryArray.from_shared_memory(shm, (2, 4), np.int32)
            array.unlink_on_del()  # the segment goes when the array does

        Raises:
            TypeError: `shm` is not a SharedMemory.
            ValueError: the segment is smaller than `shape` and `dtype` need.
            FileNotFoundError: the segment's name is gone (someone unlinked it).
        """
        if not isinstance(shm, shared_memory.SharedMemory):
            raise TypeError(
                "from_shared_memory takes a multiprocessing.shared_memory.SharedMemory as "
                f"`shm`, got {type(shm).__qualname__}; for a SharedMemoryArrayMetadata use "
                "from_metadata."
            )
        metadata = SharedMemoryArrayMetadata(shm.name, _as_shape(shape), _as_dtype(dtype))
        if shm.size < metadata.nbytes:
            raise ValueError(
                f"`shm` {shm.name!r} holds {shm.size} bytes, fewer than the "
                f"{metadata.nbytes} of a {metadata.shape} {metadata.dtype} array: pass a "
                "smaller shape or create the SharedMemory with size >= that."
            )
        mapping = attach_segment(metadata.name)
        array = np.ndarray.__new__(cls, metadata.shape, metadata.dtype, buffer=mapping)
        array._adopt(metadata, owns=False, shm=shm)
        return array

    @property
    def shm(self) -> shared_memory.SharedMemory | None:
        """The SharedMemory given to `from_shared_memory`; None for other arrays."""
        return None if self._ownership is None else self._ownership.shm

    @classmethod
    def enable_async_del(cls, num_threads: int = 1, max_outstanding_requests: int = 50) -> None:
        """Unlinks and closes segments of collected arrays in background threads.

        Garbage collection of an owning array then returns at once; the removal
        runs in one of `num_threads` threads. At most `max_outstanding_requests`
        removals wait at a time (each holds a name in /dev/shm and maybe a file
        descriptor): past that, collection waits for room. Calling it again
        replaces the threads (the queued work still completes). Applies to this
        process; forked children remove synchronously unless they enable it too.

        Example::

            SharedMemoryArray.enable_async_del(num_threads=2, max_outstanding_requests=100)
        """
        global _deleter
        for name, value in (
            ("num_threads", num_threads),
            ("max_outstanding_requests", max_outstanding_requests),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")
        previous, _deleter = _deleter, _AsyncDeleter(num_threads, max_outstanding_requests)
        if previous is not None and previous.pid == os.getpid():
            previous.pool.shutdown(wait=False)

    @classmethod
    def _disable_async_del(cls) -> None:
        """Back to synchronous removal, after the queued removals finish."""
        global _deleter
        previous, _deleter = _deleter, None
        if previous is not None and previous.pid == os.getpid():
            previous.pool.shutdown(wait=True)

    @classmethod
    def close_shm_async(cls, shm: shared_memory.SharedMemory, unlink: bool) -> None:
        """Closes `shm` and, if `unlink`, removes its name: in the background when
        `enable_async_del` was called in this process, else now.

        Example::

            SharedMemoryArray.close_shm_async(shm, unlink=True)
        """
        if not isinstance(shm, shared_memory.SharedMemory):
            raise TypeError(
                "close_shm_async takes a multiprocessing.shared_memory.SharedMemory as `shm`, "
                f"got {type(shm).__qualname__}."
            )
        if not isinstance(unlink, bool):
            raise TypeError(f"`unlink` must be a bool, got {unlink!r}.")
        _run(functools.partial(_close_shm, shm, unlink))

    def _own(self, action: str) -> _Ownership:
        if self._ownership is None:
            raise ValueError(
                f"Cannot {action}: this SharedMemoryArray is a view or a computed "
                f"result, not the array that created or attached the segment. Call it "
                f"on the array that SharedMemoryArray(...) or from_metadata() returned."
            )
        return self._ownership

    @property
    def metadata(self) -> SharedMemoryArrayMetadata:
        """Name, shape and dtype: pass it to `from_metadata` in another process."""
        self._own("take .metadata")
        assert self._metadata is not None
        return self._metadata

    def unlink_on_del(self) -> None:
        """Makes this array own the segment: it unlinks it when garbage collected.

        Only in this process: copies inherited by forked children never unlink.
        """
        ownership = self._own("unlink_on_del()")
        ownership.owns = True
        ownership.pid = os.getpid()

    def unlink(self) -> None:
        """Removes the segment's name now. Idempotent; a name already gone is fine.

        This array and every other attached one stay usable; new attaches fail.
        """
        ownership = self._own("unlink()")
        ownership.owns = False
        if not ownership.unlinked:
            ownership.unlinked = True
            _unlink(ownership)

    def close(self) -> None:
        """Gives up this array's ownership: it will never unlink the segment.

        The creator calls it to hand the segment to the process it sent
        `metadata` to (which then calls `unlink_on_del()` or `unlink()`). The pages
        stay mapped here while this array or a view of it lives. Idempotent.
        """
        self._own("close()").owns = False

    def _reference(self) -> tuple[Any, ...] | None:
        """What `_unpickle` needs to map this array again, or None if it is not in a segment."""
        holder: Any = self
        # A view's base is the array that attached the segment (numpy collapses chains).
        while isinstance(holder, np.ndarray) and not (
            isinstance(holder, SharedMemoryArray) and holder._ownership is not None
        ):
            holder = holder.base
        if not isinstance(holder, SharedMemoryArray) or holder._metadata is None or not self.size:
            return None
        metadata = holder._metadata
        offset = self.__array_interface__["data"][0] - holder.__array_interface__["data"][0]
        extents = [(dim - 1) * stride for dim, stride in zip(self.shape, self.strides, strict=True)]
        low = offset + sum(extent for extent in extents if extent < 0)
        high = offset + sum(extent for extent in extents if extent > 0) + self.itemsize
        if low < 0 or high > metadata.nbytes:
            return None  # not inside the segment's bytes: cannot be described by an offset
        return (
            type(self),
            metadata,
            offset,
            self.shape,
            self.strides,
            self.dtype,
            bool(self.flags.writeable),
        )

    def __reduce__(self) -> Any:
        # By reference, as Grain pickles it: the segment's name and this array's place in it.
        reference = self._reference()
        if reference is None:
            return self.view(np.ndarray).__reduce__()
        return _unpickle, reference

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        reference = self._reference()
        if reference is None:
            return self.view(np.ndarray).__reduce_ex__(protocol)
        return _unpickle, reference

    # A copy is deliberately a plain ndarray, not a SharedMemoryArray (numpy types it as Self).
    def __copy__(self) -> np.ndarray:  # type: ignore[override]
        # Like pickling: a copy is new memory, so it is a plain array that owns nothing.
        return np.array(self, copy=True, subok=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> np.ndarray:  # type: ignore[override]
        return np.array(self, copy=True, subok=False)


def _unpickle(
    cls: type[SharedMemoryArray],
    metadata: SharedMemoryArrayMetadata,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: np.dtype,
    writeable: bool,
) -> SharedMemoryArray:
    """Maps a pickled SharedMemoryArray again: an attached array owning nothing, or its view."""
    attached = cls.from_metadata(metadata)
    whole = offset == 0 and shape == attached.shape and strides == attached.strides
    if whole and dtype == attached.dtype:
        array = attached
    else:
        # A view of the attached array (its base), which keeps the mapping alive.
        array = np.ndarray.__new__(
            cls, shape, dtype, buffer=attached, offset=offset, strides=strides
        )
    if not writeable:
        array.flags.writeable = False
    return array
