"""A sequence of simple values held once in POSIX shared memory, readable by worker processes.

`SharedMemoryDataSource` (alias `InMemoryDataSource`) encodes every element into one
shared memory segment at construction. Pickling it sends only the segment's name, so
each worker process maps the same pages instead of receiving its own copy.

Segment layout (all integers little-endian)::

    header   magic b"GRAINSHM", uint32 version, uint32 reserved, int64 count,
             int64 payload size                                  (32 bytes)
    offsets  int64[count + 1]: element i spans payload[offsets[i]:offsets[i + 1]]
    tags     uint8[count]: the type of each element
    payload  starts 8-aligned; an int or float is the last 8 bytes of its span
             (the span may begin with padding so that the value is aligned),
             a bool is one byte, a str is UTF-8, bytes are raw, None is empty.

Ownership: the creating process owns the segment and unlinks it on `close()`, when the
source is garbage collected, or at interpreter exit. If the owner is killed, the
multiprocessing resource tracker (with which the segment stays registered) unlinks it.
Copies made by pickling, and copies a forked child inherits, never unlink.
"""

from __future__ import annotations

import mmap
import operator
import os
import struct
import types
import weakref
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing import resource_tracker, shared_memory
from typing import Any, ClassVar, SupportsIndex, TypeAlias, cast

import numpy as np

__all__ = ["MAX_ITEM_BYTES", "InMemoryDataSource", "SharedMemoryDataSource"]

Storable: TypeAlias = int | float | bool | str | bytes | None

# The DataLoader guide limits each str and bytes value to less than 10M bytes.
MAX_ITEM_BYTES = 10_000_000
"""A str (as UTF-8) or bytes element must be shorter than this many bytes."""

_MAGIC = b"GRAINSHM"
_VERSION = 1
_HEADER = struct.Struct("<8sIIqq")
_INT64 = struct.Struct("<q")
_FLOAT64 = struct.Struct("<d")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_NONE, _BOOL, _INT, _FLOAT, _STR, _BYTES = range(6)
_TAG_OF_TYPE = {type(None): _NONE, bool: _BOOL, int: _INT, float: _FLOAT, str: _STR, bytes: _BYTES}
_ALLOWED = "int, float, bool, str, bytes and None"
# Lone surrogates are legal in a Python str; "surrogatepass" lets them round-trip.
_UTF8_ERRORS = "surrogatepass"
# __iter__ decodes this many elements per vectorized lookup.
_ITER_CHUNK = 1024


def _align8(position: int) -> int:
    return (position + 7) & ~7


# --------------------------------------------------------------------------- encoding
#
# Each encoder returns (tags uint8[n], offsets int64[n + 1], payload buffer).


def _encode(elements: Iterable[Any]) -> tuple[np.ndarray, np.ndarray, Any]:
    if isinstance(elements, range):
        words = _range_words(elements)
        # A range reaching outside int64 goes element by element, which names the
        # first bad index without materializing the range.
        return _encode_words(words, _INT) if words is not None else _encode_mixed(elements)
    if isinstance(elements, np.ndarray) and elements.ndim == 1:
        encoded = _encode_array(elements)
        if encoded is not None:
            return encoded
    values = elements if isinstance(elements, list | tuple) else list(elements)
    kinds = set(map(type, values))
    if len(kinds) == 1:
        encoded = _encode_uniform(kinds.pop(), values)
        if encoded is not None:
            return encoded
    return _encode_mixed(values)


def _range_words(values: range) -> np.ndarray | None:
    """The int64 values of `values`, or None when one lies outside int64."""
    if len(values) == 0:
        return np.zeros(0, np.int64)
    if not all(_INT64_MIN <= end <= _INT64_MAX for end in (values[0], values[-1])):
        return None
    # Wrapping uint64 arithmetic: a step or partial product may overflow int64, yet
    # every final value is in range, so its value modulo 2**64 is the right one.
    step = np.uint64(values.step % 2**64)
    start = np.uint64(values.start % 2**64)
    return (np.arange(len(values), dtype=np.uint64) * step + start).view(np.int64)


def _encode_array(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any] | None:
    kind = values.dtype.kind
    if kind == "b":
        return _encode_bools(values.astype(np.uint8))
    if kind == "i":
        return _encode_words(values.astype("<i8"), _INT)
    if kind == "u" and (values.size == 0 or int(values.max()) <= _INT64_MAX):
        return _encode_words(values.astype("<i8"), _INT)
    if kind == "f" and values.dtype.itemsize <= 8:
        return _encode_words(values.astype("<f8"), _FLOAT)
    return None  # element by element: names the offending index


def _encode_uniform(kind: type, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """The vectorized encoding of values that all have exactly type `kind`, if any."""
    if kind is int:
        try:
            return _encode_words(np.array(values, dtype="<i8"), _INT)
        except OverflowError:
            return None  # element by element: names the index outside int64
    if kind is float:
        return _encode_words(np.array(values, dtype="<f8"), _FLOAT)
    if kind is bool:
        return _encode_bools(np.array(values, dtype=np.uint8))
    if kind is type(None):
        n = len(values)
        return np.full(n, _NONE, np.uint8), np.zeros(n + 1, np.int64), b""
    if kind is str:
        return _encode_blobs([value.encode("utf-8", _UTF8_ERRORS) for value in values], _STR)
    if kind is bytes:
        return _encode_blobs(values, _BYTES)
    return None


def _encode_words(words: np.ndarray, tag: int) -> tuple[np.ndarray, np.ndarray, Any]:
    n = len(words)
    return np.full(n, tag, np.uint8), np.arange(0, 8 * n + 1, 8, dtype=np.int64), words


def _encode_bools(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
    n = len(flags)
    return np.full(n, _BOOL, np.uint8), np.arange(n + 1, dtype=np.int64), flags


def _encode_blobs(chunks: Sequence[bytes], tag: int) -> tuple[np.ndarray, np.ndarray, Any]:
    n = len(chunks)
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=n)
    too_long = np.flatnonzero(lengths >= MAX_ITEM_BYTES)
    if too_long.size:
        index = int(too_long[0])
        _raise_too_long(index, "str" if tag == _STR else "bytes", int(lengths[index]))
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.full(n, tag, np.uint8), offsets, b"".join(chunks)


def _encode_mixed(values: Iterable[Any]) -> tuple[np.ndarray, np.ndarray, Any]:
    tags = bytearray()
    offsets = [0]
    chunks = []
    position = 0
    for index, value in enumerate(values):
        tag, chunk = _encode_one(index, value)
        if tag in (_INT, _FLOAT):
            padding = -position % 8
            if padding:
                chunks.append(bytes(padding))
                position += padding
        chunks.append(chunk)
        position += len(chunk)
        tags.append(tag)
        offsets.append(position)
    return np.frombuffer(tags, np.uint8), np.array(offsets, np.int64), b"".join(chunks)


def _encode_one(index: int, value: Any) -> tuple[int, bytes]:
    kind = type(value)
    if kind is int:
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError(
                f"Element {index} is the int {value}, outside the int64 range "
                f"[-2**63, 2**63 - 1] that a SharedMemoryDataSource stores. Store such "
                f"integers as str (e.g. str(value)) or bytes instead."
            )
        return _INT, _INT64.pack(value)
    if kind is float:
        return _FLOAT, _FLOAT64.pack(value)
    if kind is str:
        encoded = value.encode("utf-8", _UTF8_ERRORS)
        if len(encoded) >= MAX_ITEM_BYTES:
            _raise_too_long(index, "str", len(encoded))
        return _STR, encoded
    if kind is bytes:
        if len(value) >= MAX_ITEM_BYTES:
            _raise_too_long(index, "bytes", len(value))
        return _BYTES, value
    if kind is bool:
        return _BOOL, b"\x01" if value else b"\x00"
    if value is None:
        return _NONE, b""
    return _encode_one(index, _as_builtin(index, value))


def _as_builtin(index: int, value: Any) -> Storable:
    """`value` (a subclass of an allowed type, or a numpy scalar) as its built-in type."""
    if isinstance(value, np.generic):
        plain = value.item()
        if type(plain) in _TAG_OF_TYPE:
            return plain
    elif isinstance(value, int):
        return int(value)
    elif isinstance(value, float):
        return float(value)
    elif isinstance(value, str):
        return str.__str__(value)
    elif isinstance(value, bytes):
        return bytes(value)
    raise TypeError(
        f"Element {index} has type {type(value).__qualname__}, which a "
        f"SharedMemoryDataSource cannot store: it stores only {_ALLOWED} values "
        f"(numpy scalars of those kinds are converted). Serialize richer records to "
        f"bytes (e.g. with pickle), or write them to an ArrayRecord file and read it "
        f"with ArrayRecordDataSource."
    )


def _raise_too_long(index: int, kind: str, size: int) -> None:
    raise ValueError(
        f"Element {index} is a {kind} of {size} bytes; a SharedMemoryDataSource stores "
        f"str (as UTF-8) and bytes values shorter than {MAX_ITEM_BYTES} bytes. Split the "
        f"value, or keep large records in files (e.g. ArrayRecord) instead."
    )


# --------------------------------------------------------------------------- segments


def _create_segment(name: str | None, elements: Iterable[Any]) -> shared_memory.SharedMemory:
    """A new segment holding `elements`, its writable mapping already closed."""
    tags, offsets, payload = _encode(elements)
    n = len(tags)
    if isinstance(payload, np.ndarray):
        payload = payload.view(np.uint8)
    payload_bytes = memoryview(payload)
    payload_at = _align8(_HEADER.size + 8 * (n + 1) + n)
    size = payload_at + payload_bytes.nbytes
    try:
        # Creating registers the segment with the resource tracker (and starts the
        # tracker, before any fork): if this process is killed, the tracker unlinks it.
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    except FileExistsError:
        raise FileExistsError(
            f"A shared memory segment named {name!r} already exists. Pass another "
            f"name, or name=None to let SharedMemoryDataSource pick a fresh one."
        ) from None
    try:
        buffer = cast(memoryview, shm.buf)  # set for as long as shm is open
        _HEADER.pack_into(buffer, 0, _MAGIC, _VERSION, 0, n, payload_bytes.nbytes)
        np.frombuffer(buffer, "<i8", n + 1, _HEADER.size)[:] = offsets
        np.frombuffer(buffer, np.uint8, n, _HEADER.size + 8 * (n + 1))[:] = tags
        buffer[payload_at:size] = payload_bytes
        del buffer
        shm.close()
    except BaseException:
        shm.close()
        shm.unlink()
        raise
    return shm


def _map_read_only(name: str) -> mmap.mmap:
    """Maps the existing segment `name` read-only, without the resource tracker.

    Why not `SharedMemory(name=name)`: before Python 3.13 attaching registers the
    segment with this process's resource tracker. In a process that does not share
    the owner's tracker (one started by subprocess, say), that tracker then unlinks
    the segment when the process exits, under the owner's feet; and unregistering
    it again from a tracker the owner shares would undo the owner's own
    registration, losing the cleanup if the owner is killed. Attachers therefore
    open the segment directly and leave the tracker alone.
    """
    import _posixshmem  # POSIX only, like the segments themselves

    fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, 0o600)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)  # the mapping keeps the segment alive on its own


class _Layout:
    """Read-only numpy and memoryview views over one mapped segment.

    Dropping the last reference to a layout unmaps the segment (CPython frees the
    views, then the mmap). A reader holding one keeps reading safely even while
    another thread closes the source.
    """

    __slots__ = ("floats", "length", "offsets", "payload", "payload_bytes", "tags", "words")

    def __init__(self, mapping: mmap.mmap, name: str) -> None:
        view = memoryview(mapping)
        if len(view) < _HEADER.size:
            raise ValueError(f"Shared memory segment {name!r} is not a SharedMemoryDataSource.")
        magic, version, _, n, payload_size = _HEADER.unpack_from(view, 0)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(
                f"Shared memory segment {name!r} is not a version-{_VERSION} "
                f"SharedMemoryDataSource segment (magic {magic!r}, version {version}); "
                f"read it with the grain version that wrote it."
            )
        tags_at = _HEADER.size + 8 * (n + 1)
        payload_at = _align8(tags_at + n)
        self.length: int = n
        self.offsets = np.frombuffer(view, "<i8", n + 1, _HEADER.size)
        self.tags = np.frombuffer(view, np.uint8, n, tags_at)
        self.payload = view[payload_at : payload_at + payload_size]
        self.payload_bytes = np.frombuffer(view, np.uint8, payload_size, payload_at)
        self.words = np.frombuffer(view, "<i8", payload_size // 8, payload_at)
        self.floats = self.words.view("<f8")

    def decode(self, tag: int, start: int, end: int) -> Storable:
        if tag == _INT:
            return self.words.item((end >> 3) - 1)
        if tag == _FLOAT:
            return self.floats.item((end >> 3) - 1)
        if tag == _STR:
            return str(self.payload[start:end], "utf-8", _UTF8_ERRORS)
        if tag == _BYTES:
            return bytes(self.payload[start:end])
        if tag == _BOOL:
            return self.payload[start] != 0
        return None

    def get(self, index: int) -> Storable:
        return self.decode(
            self.tags.item(index), self.offsets.item(index), self.offsets.item(index + 1)
        )

    def get_many(self, indices: np.ndarray) -> list[Storable]:
        if indices.size == 0:
            return []
        tags = self.tags[indices]
        first = tags[0]
        uniform = bool((tags == first).all())
        if uniform and first in (_INT, _FLOAT):
            words = self.words if first == _INT else self.floats
            return words[(self.offsets[indices + 1] >> 3) - 1].tolist()
        if uniform and first == _BOOL:
            return (self.payload_bytes[self.offsets[indices]] != 0).tolist()
        if uniform and first == _NONE:
            return [None] * indices.size
        starts = self.offsets[indices].tolist()
        ends = self.offsets[indices + 1].tolist()
        decode = self.decode
        return [decode(*parts) for parts in zip(tags.tolist(), starts, ends, strict=True)]


class _State:
    """What closing needs, kept apart from the source so that its finalizer can hold it."""

    __slots__ = ("closed", "layout", "length", "name", "nbytes", "owner_pid", "segment")

    def __init__(
        self,
        name: str,
        length: int,
        nbytes: int,
        owner_pid: int | None,
        segment: shared_memory.SharedMemory | None,
    ) -> None:
        self.name = name
        self.length = length
        self.nbytes = nbytes
        self.owner_pid = owner_pid
        self.segment = segment
        self.layout: _Layout | None = None
        self.closed = False


def _release(state: _State) -> None:
    """Drops this process's mapping; the owner process also unlinks the segment."""
    state.closed = True
    state.layout = None
    segment, state.segment = state.segment, None
    # A forked child inherits the owner's state: only the creating pid may unlink.
    if segment is None or os.getpid() != state.owner_pid:
        return
    try:
        segment.unlink()
    except FileNotFoundError:
        # Someone removed the name already; still stop the tracker from trying to.
        resource_tracker.unregister("/" + state.name, "shared_memory")


def _reattach(
    cls: type[SharedMemoryDataSource], name: str, length: int, nbytes: int
) -> SharedMemoryDataSource:
    """Unpickles a source as a non-owning view of segment `name`, mapped on first read."""
    source = cls.__new__(cls)
    source._state = _State(name, length, nbytes, owner_pid=None, segment=None)
    source._finalizer = None
    return source


# --------------------------------------------------------------------------- the source


class SharedMemoryDataSource:
    """A sequence of int, float, bool, str, bytes and None values in shared memory.

    The elements are encoded once into a single POSIX shared memory segment.
    Pickling the source (as worker processes do) sends only the segment's name;
    each process maps the same physical pages on its first read, so the data is
    not replicated per worker. Values come back as the built-in type they were
    stored as (a bool stays a bool; numpy scalars and subclasses of the allowed
    types are stored as the built-in type). ints must fit in int64; str (as UTF-8)
    and bytes values must be shorter than `MAX_ITEM_BYTES` (10M) bytes.

    The creating process owns the segment: `close()` (or leaving a ``with``
    block, garbage collection, or interpreter exit) unlinks it. Copies in other
    processes never unlink it, and those that have already read keep reading
    after the owner closes; one that first reads afterwards gets
    FileNotFoundError. If the owner is killed, multiprocessing's resource tracker
    removes the segment.

    Example::

        source = grain.InMemoryDataSource(range(5))
        print(source)  # InMemoryDataSource(len=5, name='psm_...', bytes=128)
        source  # SharedMemoryDataSource(len=5, name='psm_...', bytes=128): the same class
        source[0]  # 0

    Args:
        elements: the values, in order. A `range`, a 1-D numeric or bool numpy
            array, or a list of one type is encoded in one vectorized pass. None
            (with a `name`): read the segment another source created under that
            name, as Grain does; this source then never unlinks it.
        name: the segment's name (without a leading "/"); None picks a fresh one.

    Raises:
        TypeError: an element has another type (the index and type are named).
        OverflowError: an int lies outside int64.
        ValueError: a str or bytes element has `MAX_ITEM_BYTES` bytes or more, or
            neither `elements` nor `name` was given.
        FileExistsError: a segment called `name` already exists (with `elements`).
        FileNotFoundError: no segment called `name` exists (without `elements`).
    """

    # __getitems__ returns [self[i] for i in indices]: see RandomAccessDataSource.
    batched_reads: ClassVar[bool] = True

    _state: _State
    _finalizer: weakref.finalize | None

    def __init__(self, elements: Iterable[Storable] | None = None, *, name: str | None = None):
        if elements is None:
            if name is None:
                raise ValueError(
                    "Elements or name must be provided. "
                    "SharedMemoryDataSource needs `elements` to store, or the `name` of a "
                    "segment another SharedMemoryDataSource created, to read it: give one."
                )
            self._attach(name)
            return
        if not isinstance(elements, Iterable):
            raise TypeError(
                f"`elements` of SharedMemoryDataSource must be an iterable (a list, say) of "
                f"{_ALLOWED} values, got {type(elements).__name__}."
            )
        segment = _create_segment(name, elements)
        self._state = _State(segment.name, 0, segment.size, owner_pid=os.getpid(), segment=segment)
        # Registered before mapping, so that a failed mapping still unlinks.
        self._finalizer = weakref.finalize(self, _release, self._state)
        layout = _Layout(_map_read_only(segment.name), segment.name)
        self._state.length = layout.length
        self._state.layout = layout

    def _attach(self, name: str) -> None:
        """Reads the segment `name` made by another source, without owning it."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"`name` must be a non-empty str, got {name!r}.")
        try:
            mapping = _map_read_only(name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"[Errno 2] No such file or directory: '/{name}'. "
                f"No shared memory segment named {name!r}: create it first with "
                f"SharedMemoryDataSource(elements, name={name!r}), and keep that source open."
            ) from None
        layout = _Layout(mapping, name)
        self._state = _State(name, layout.length, len(mapping), owner_pid=None, segment=None)
        self._state.layout = layout
        self._finalizer = None

    @property
    def name(self) -> str:
        """The shared memory segment's name (under /dev/shm on Linux)."""
        return self._state.name

    @property
    def shm(self) -> types.SimpleNamespace:
        """The segment's `name` and `size` in bytes, as Grain's source has them on its
        ``shm`` (there a SharedMemory object): ``SharedMemoryDataSource(name=src.shm.name)``."""
        return types.SimpleNamespace(name=self._state.name, size=self._state.nbytes)

    def _layout(self) -> _Layout:
        state = self._state
        layout = state.layout
        if layout is not None:
            return layout
        if state.closed:
            raise ValueError(
                f"{self!r} is closed, so its shared memory can no longer be read. Read "
                f"before calling close() (or leaving its `with` block), or create a new "
                f"source."
            )
        try:
            mapping = _map_read_only(state.name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"Shared memory segment {state.name!r} no longer exists: the "
                f"SharedMemoryDataSource that created it was closed, or its process "
                f"exited. Keep the creating source open, and its process alive, while "
                f"other processes read from it."
            ) from None
        layout = _Layout(mapping, state.name)
        if layout.length != state.length:
            raise ValueError(
                f"Shared memory segment {state.name!r} holds {layout.length} elements, "
                f"not the {state.length} of the source pickled under that name: the "
                f"name was reused by a newer segment. Pickle the source again."
            )
        state.layout = layout
        return layout

    def __len__(self) -> int:
        return self._state.length

    def __getitem__(self, index: SupportsIndex) -> Storable:
        layout = self._layout()
        try:
            position = operator.index(index)
        except TypeError:
            raise TypeError(
                f"SharedMemoryDataSource indices must be integers, not "
                f"{type(index).__qualname__}; read many elements with "
                f"__getitems__(indices)."
            ) from None
        n = layout.length
        if position < 0:
            position += n
        if not 0 <= position < n:
            raise IndexError(
                f"Index {index} is out of range for a SharedMemoryDataSource of length "
                f"{n}; use an index in [-{n}, {n})."
            )
        return layout.get(position)

    def __getitems__(self, indices: Sequence[SupportsIndex]) -> list[Storable]:
        """The elements at `indices` (negative ones count from the end), as a list."""
        layout = self._layout()
        return layout.get_many(_positions(indices, layout.length))

    def __iter__(self) -> Iterator[Storable]:
        n = len(self)
        for start in range(0, n, _ITER_CHUNK):
            yield from self.__getitems__(range(start, min(start + _ITER_CHUNK, n)))

    def count(self, value: Storable) -> int:
        """How many elements equal `value` (Grain's ShareableList method)."""
        return sum(1 for element in self if element == value)

    def index(self, value: Storable) -> int:
        """The position of the first element equal to `value`; ValueError if none is."""
        for position, element in enumerate(self):
            if element == value:
                return position
        raise ValueError(f"{value!r} is not in {self!r}.")

    def unlink(self) -> None:
        """Removes the segment's name now (readers that mapped it keep reading).

        The creating source does this itself on `close()`; call it to remove a
        segment attached by name (``SharedMemoryDataSource(name=...)``) whose
        creator cannot. Idempotent.
        """
        import _posixshmem  # POSIX only, like the segments themselves

        state = self._state
        segment = state.segment
        try:
            if segment is not None and os.getpid() == state.owner_pid:
                # Unlinked (and unregistered from the resource tracker) once: close()
                # then has nothing left to unlink.
                state.segment = None
                segment.unlink()
                segment.close()
            else:
                _posixshmem.shm_unlink("/" + state.name)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Releases the shared memory; the creating process also unlinks the segment.

        Idempotent. Reading afterwards raises ValueError.
        """
        if self._finalizer is not None:
            self._finalizer()
        else:
            _release(self._state)

    def __enter__(self) -> SharedMemoryDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        state = self._state
        if state.closed:
            raise ValueError(
                f"Cannot pickle {self!r}: it is closed and its segment may be gone. "
                f"Pickle the source while it is open."
            )
        return _reattach, (type(self), state.name, state.length, state.nbytes)

    def __repr__(self) -> str:
        return self._describe("SharedMemoryDataSource")

    def __str__(self) -> str:
        # The one class has two names; print() uses the DataLoader guide's (as Grain does).
        return self._describe("InMemoryDataSource")

    def _describe(self, name: str) -> str:
        state = self._state
        closed = ", closed" if state.closed else ""
        return f"{name}(len={state.length}, name={state.name!r}, bytes={state.nbytes}{closed})"


def _positions(indices: Sequence[SupportsIndex], n: int) -> np.ndarray:
    """`indices` as in-range non-negative int64 positions, checked."""
    if not isinstance(indices, np.ndarray | range | list | tuple):
        indices = list(indices)
    array = np.asarray(indices)
    if array.size == 0:
        return np.zeros(0, np.int64)
    kind = array.dtype.kind
    if array.ndim != 1 or kind not in "iuO":
        raise TypeError(
            f"SharedMemoryDataSource.__getitems__ takes a flat sequence of integers, "
            f"got {array.ndim}-D values of dtype {array.dtype}. Pass e.g. a list of "
            f"ints or a 1-D integer numpy array."
        )
    if kind == "O":
        # Python ints beyond int64 (or objects with __index__): check them one by one.
        array = np.array([_checked(operator.index(value), n) for value in array], np.int64)
    elif kind == "u" and int(array.max()) >= n:
        _raise_out_of_range(int(array.max()), n)
    positions = array.astype(np.int64, copy=False)
    positions = np.where(positions < 0, positions + n, positions)
    bad = (positions < 0) | (positions >= n)
    if bad.any():
        _raise_out_of_range(int(array[np.argmax(bad)]), n)
    return positions


def _checked(index: int, n: int) -> int:
    if not -n <= index < n:
        _raise_out_of_range(index, n)
    return index


def _raise_out_of_range(index: int, n: int) -> None:
    raise IndexError(
        f"Index {index} is out of range for a SharedMemoryDataSource of length {n}; "
        f"use indices in [-{n}, {n})."
    )


InMemoryDataSource = SharedMemoryDataSource
"""The name the DataLoader guide uses for `SharedMemoryDataSource`."""
