"""Window shuffle: randomness within windows of consecutive elements, for both dataset kinds.

MapDataset: index i of epoch e (``e = i // n``, offset ``o = i % n``) reads
parent index ``e * n + W_e(o)``, where W_e (grain_index's
`window_shuffle_array`) is a keyed bijection that keeps each window of
`window_size` consecutive offsets in place as a set and orders each window of
each epoch differently. The last, partial window is shuffled within itself.
Nothing is buffered: any element is computed from its index alone.

IterDataset: the iterator reads `window_size` elements from its parent into a
buffer, returns them in a random order, then reads the next window (the
in-memory half of the hierarchical shuffle that the advanced tutorial
describes). Window k's order is a permutation keyed by (stage seed, k), so the
state needs no data, only where window k started. It is Grain's::

    {"parent_window_start_state": parent state at the start of window k,
     "window_index": k, "pos_in_window": elements of window k already returned}

Restoring sets the parent to that state; the next call reads window k again
and skips its first `pos_in_window` elements of the (same) order, so a fresh
iterator continues exactly, even in the middle of a window. As in Grain, a
window used up is left only when the next one is read: after its last element
the state keeps its start and count and already names the next window
(``window_index`` k + 1, ``pos_in_window`` = its size); a restore there reads
it again to find where the next begins. States of earlier versions of this
library (``{"parent", "window", "emitted"}``, a used-up window already left)
restore as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._core._base import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from grain_dataset._core._iter_stage import Anchor, IterStage, StageIterator, iterator_of
from grain_dataset._core._seeding import stage_seed
from grain_dataset._core._stage import MapStage, epochs_of, fits_int64
from grain_dataset._core._state import check_state, renamed_keys
from grain_dataset._runtime._fingerprint import seed_param, token
from grain_index import checks, window_shuffle, window_shuffle_array

_UINT64 = 1 << 64


class WindowShuffleMapDataset(MapStage):
    """The parent's elements shuffled within windows of `window_size` consecutive indices.

    Each window of each epoch gets its own order; elements never leave their
    window, so a window shuffle keeps a dataset's coarse order (cheaper reads
    from files grouped by position) while mixing it locally.

    Args:
      parent: the MapDataset to shuffle.
      window_size: indices per window, an int >= 1. A window at least as long
        as the dataset shuffles each epoch globally.
      seed: an int in [0, 2**32); if None, the seed is derived from
        ``ds.seed(...)`` upstream.

    Example::

        ds = grain.MapDataset.range(1000).pipe(
            grain.experimental.WindowShuffleMapDataset, window_size=128, seed=0
        )
        sorted(ds[:128]) == list(range(128))  # True: the first window stays together
    """

    _order_as_grain = False

    def _fingerprint_token(self) -> str | None:
        return token("window_shuffle", self._window_size, seed_param(self._seed))

    def __init__(self, parent: MapDataset[Any], *, window_size: int, seed: int | None = None):
        super().__init__(parent)
        if not isinstance(parent, MapDataset):
            raise TypeError(
                f"`parent` of WindowShuffleMapDataset must be a MapDataset, got "
                f"{type(parent).__name__}; use WindowShuffleIterDataset for an IterDataset."
            )
        self._parent = parent
        self._window_size = checks.int_in_range(window_size, "window_size", 1)
        self._seed = stage_seed(self, seed, "window_shuffle")
        self._length = len(parent)

    def __len__(self) -> int:
        return self._length

    def _offsets(self, offsets: np.ndarray, epochs: Any) -> np.ndarray:
        return window_shuffle_array(
            offsets, epochs, length=self._length, window_size=self._window_size, seed=self._seed
        )

    def _getitem(self, index: int) -> Any:
        n = self._length
        epoch, offset = divmod(index, n)
        # Epoch keys wrap after 2**64 epochs, far beyond any real run.
        shuffled = window_shuffle(
            offset, epoch % _UINT64, length=n, window_size=self._window_size, seed=self._seed
        )
        return self._parent._getitem(epoch * n + shuffled)

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        n = self._length
        if not n:
            raise IndexError("the dataset is empty: it has no element at any index.")
        if not fits_int64(indices, n, n):
            return super()._getitems(indices)
        epochs, offsets = epochs_of(indices, n)
        return self._parent._getitems(epochs * n + self._offsets(offsets, epochs))

    def _describe(self) -> str:
        return f"window_size={self._window_size}, len={self._length}"


class WindowShuffleIterDataset(IterStage):
    """The parent's elements, read `window_size` at a time and returned in a random order.

    Memory holds one window of elements. Each window's order is a permutation
    keyed by the seed and the window's number, so the iterator state is a
    few integers and restores exactly in the middle of a window. A MapDataset
    parent is read with ``.to_iter_dataset()``.

    Args:
      parent: the IterDataset to shuffle.
      window_size: elements per window, an int >= 1.
      seed: an int in [0, 2**32); if None, the seed is derived from
        ``ds.seed(...)`` upstream.

    Example::

        ds = grain.experimental.WindowShuffleIterDataset(
            grain.MapDataset.range(100).to_iter_dataset(), window_size=10, seed=42
        )
        it = iter(ds)
        sorted(next(it) for _ in range(10)) == list(range(10))  # True: window 0 comes first
    """

    _positional_chain = True
    _order_as_grain = False

    def _fingerprint_token(self) -> str | None:
        return token("window_shuffle", self._window_size, seed_param(self._seed))

    def __init__(self, parent: IterDataset[Any], *, window_size: int, seed: int | None = None):
        super().__init__(as_iter_dataset(parent, "parent"))
        self._window_size = checks.int_in_range(window_size, "window_size", 1)
        self._seed = stage_seed(self, seed, "window_shuffle")

    def _window_order(self, window: int, size: int) -> list[int]:
        """The buffer slots of window number `window` (of `size` elements) in output order."""
        # grain_index's window permutation with the window number in the epoch's
        # place: one keyed permutation per window, and no per-seed cache to churn.
        offsets = window_shuffle_array(
            np.arange(size), window % _UINT64, length=size, window_size=size, seed=self._seed
        )
        return offsets.tolist()

    def _describe(self) -> str:
        return f"window_size={self._window_size}"


_KEYS = ("parent_window_start_state", "window_index", "pos_in_window")


@iterator_of(WindowShuffleIterDataset)
class _WindowShuffleIterator(StageIterator):
    def __init__(self, dataset: WindowShuffleIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._anchor = Anchor(parent)  # where the current window begins
        self._window = 0
        self._emitted = 0
        self._buffer: list[Any] = []
        self._order: list[int] | None = None  # None: the window is not read in full yet
        # The window at the anchor is used up (`_window` already names the next one);
        # after a restore, None: not known until the window is read again.
        self._done: bool | None = False
        self._parent_ended = False  # the last read of a window met the parent's end

    def _read_window(self) -> None:
        """Reads the rest of the window at the anchor from the parent into the buffer."""
        size = self._dataset._window_size
        buffer = self._buffer
        # A parent error leaves the elements read so far in the buffer; the next
        # call goes on filling, as if the failing element had been skipped upstream.
        while len(buffer) < size:
            try:
                buffer.append(next(self._parent))
            except StopIteration:
                self._parent_ended = True
                break

    def _fill(self) -> list[int]:
        """Reads the current window from the parent and draws its order."""
        if self._done is None:  # restored: is the window at the anchor used up?
            self._read_window()
            if self._buffer and self._emitted == len(self._buffer):
                self._done = True
            elif self._emitted > len(self._buffer) or (self._emitted and not self._buffer):
                raise ValueError(
                    f"the restored state of {self._dataset!r} says {self._emitted} elements "
                    f"of window {self._window} were returned, but it holds "
                    f"{len(self._buffer)}: the state is from a different pipeline or the "
                    "parent's data changed."
                )
            else:
                self._done = False
        if self._done:
            # A window cut short by the parent's end was the last: the state stays the
            # used-up window's. Otherwise the parent stands where the next one begins,
            # which the state names from now on even if it turns out to be the end (as
            # in Grain).
            if self._parent_ended:
                return []
            self._anchor.move()
            self._buffer, self._emitted, self._done = [], 0, False
            self._read_window()
        else:
            self._read_window()
        buffer = self._buffer
        self._order = self._dataset._window_order(self._window, len(buffer)) if buffer else []
        return self._order

    def __next__(self) -> Any:
        order = self._fill() if self._order is None else self._order
        if self._emitted >= len(order):
            raise StopIteration
        slot = order[self._emitted]
        value = self._buffer[slot]
        self._buffer[slot] = None  # the window's memory is released as it is returned
        self._emitted += 1
        if self._emitted == len(order):
            # Used up: the next window's number now, left when the next call reads it.
            self._window += 1
            self._done = True
            self._buffer = []
            self._order = None
        return value

    def get_state(self) -> dict[str, Any]:
        return {
            _KEYS[0]: self._anchor.saved(),
            _KEYS[1]: self._window,
            _KEYS[2]: self._emitted,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        state = renamed_keys(state, dict(zip(("parent", "window", "emitted"), _KEYS, strict=True)))
        check_state(state, repr(self._dataset), _KEYS, nested=_KEYS[:1])
        window_size = self._dataset._window_size
        emitted = state[_KEYS[2]]
        if emitted > window_size:
            raise ValueError(
                f"state[{_KEYS[2]!r}] of {self._dataset!r} must be <= window_size "
                f"({window_size}), got {emitted}; the state is from a pipeline with another "
                "window_size."
            )
        if emitted and not state[_KEYS[1]] and emitted == window_size:
            raise ValueError(
                f"state[{_KEYS[2]!r}] of {self._dataset!r} says window 0 is used up, but "
                f"then state[{_KEYS[1]!r}] would name window 1, not 0; the state is corrupt."
            )
        self._anchor.restore(state[_KEYS[0]])
        self._window = state[_KEYS[1]]
        self._emitted = emitted
        # The window is read again lazily, by the next call.
        self._buffer = []
        self._order = None
        self._done = None
        self._parent_ended = False
