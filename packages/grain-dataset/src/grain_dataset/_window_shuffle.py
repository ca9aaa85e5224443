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
state needs no data, only where window k started::

    {"parent": parent state at the start of window k, "window": k,
     "emitted": elements of window k already returned}

Restoring sets the parent to that state; the next call reads window k again
and skips its first `emitted` elements of the (same) order, so a fresh
iterator continues exactly, even in the middle of a window. After the last
element of a window the state already points at the next window
(``emitted == 0``), so a restore there reads nothing twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._base import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from grain_dataset._fingerprint import seed_param, token
from grain_dataset._iter_stage import Anchor, IterStage, StageIterator, check_below, iterator_of
from grain_dataset._seeding import stage_seed
from grain_dataset._stage import MapStage, epochs_of, fits_int64
from grain_dataset._state import check_state
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


@iterator_of(WindowShuffleIterDataset)
class _WindowShuffleIterator(StageIterator):
    def __init__(self, dataset: WindowShuffleIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._anchor = Anchor(parent)  # where the current window begins
        self._window = 0
        self._emitted = 0
        self._buffer: list[Any] = []
        self._order: list[int] | None = None  # None: the window is not read in full yet

    def _fill(self) -> list[int]:
        """Reads the rest of the current window from the parent and draws its order."""
        size = self._dataset._window_size
        buffer = self._buffer
        # A parent error leaves the elements read so far in the buffer; the next
        # call goes on filling, as if the failing element had been skipped upstream.
        while len(buffer) < size:
            try:
                buffer.append(next(self._parent))
            except StopIteration:
                break
        if self._emitted >= len(buffer) and buffer:
            raise ValueError(
                f"the restored state of {self._dataset!r} says {self._emitted} elements of "
                f"window {self._window} were returned, but it holds {len(buffer)}: the state "
                "is from a different pipeline or the parent's data changed."
            )
        self._order = self._dataset._window_order(self._window, len(buffer)) if buffer else []
        return self._order

    def __next__(self) -> Any:
        order = self._fill() if self._order is None else self._order
        if not order:
            raise StopIteration
        slot = order[self._emitted]
        value = self._buffer[slot]
        self._buffer[slot] = None  # the window's memory is released as it is returned
        self._emitted += 1
        if self._emitted == len(order):
            # The window is done: the parent now stands where the next one begins.
            self._anchor.move()
            self._window += 1
            self._emitted = 0
            self._buffer = []
            self._order = None
        return value

    def get_state(self) -> dict[str, Any]:
        return {
            "parent": self._anchor.saved(),
            "window": self._window,
            "emitted": self._emitted,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("parent", "window", "emitted"))
        window_size = self._dataset._window_size
        emitted = check_below(state, "emitted", window_size, self._dataset, "window_size")
        self._anchor.restore(state["parent"])
        self._window = state["window"]
        self._emitted = emitted
        # The window is read again lazily, by the next call.
        self._buffer = []
        self._order = None
