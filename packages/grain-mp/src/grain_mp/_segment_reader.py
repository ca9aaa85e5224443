"""The parent side of the transport: `SegmentReader` (see grain_mp._transport for the model)."""

from __future__ import annotations

import collections
import io
import mmap
import os
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from grain_mp._sweep import (
    attach_segment,
    remove_segments,
    unlink_segment,
)
from grain_mp._transport import (
    _MAX_MAPPINGS,
    _SINGLE_SKELETON,
    Payload,
    _check_generation,
    _close_mapping,
    _Unpickler,
    _view,
)


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
