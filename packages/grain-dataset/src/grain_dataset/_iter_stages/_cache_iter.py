"""`CacheIterDataset`: keep the elements of one whole pass in memory, serve later passes.

The first iterator of the dataset that reads its parent from the first element
to the end publishes what it read (each element with the parent's state after
it) on the dataset; every iterator created later, and one restored from a
state, reads from that list instead of the parent. The usual use is an
expensive pipeline repeated for several epochs: ``CacheIterDataset(ds)``
before a ``RepeatIterDataset``. Elements are kept as they are (not copied), so
the memory they take is held for the life of the dataset.

State: ``{"position": p, "parent": the parent's state after element p - 1,
"cache_filled": whether this iterator reads from the cache}``. Keeping the
parent's state makes a state restorable in a process where the cache is still
empty: that iterator reads the parent from there (and, having skipped the
start, does not fill the cache).
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._state import check_state

T = TypeVar("T")


class CacheIterDataset(IterDataset[T]):
    """The elements of `parent`, read from memory after the first complete pass.

    Args:
      parent: the dataset to cache (a MapDataset is read with ``to_iter_dataset()``).
        Its elements must fit in memory and be the same on every pass (they are
        read once).

    Example::

        ds = grain.experimental.CacheIterDataset(expensive.to_iter_dataset())
        ds = grain.experimental.RepeatIterDataset(ds, num_epochs=10)  # epochs 2-10 from memory
    """

    def _fingerprint_token(self) -> str | None:
        return None

    def __init__(self, parent: IterDataset[T]):
        super().__init__(as_iter_dataset(parent, "parent", "CacheIterDataset"))
        self._lock = threading.Lock()
        self._values: list[Any] | None = None
        self._states: list[Any] | None = None  # _states[p]: the parent's state after p elements

    @property
    def is_filled(self) -> bool:
        """Whether a complete pass is cached."""
        return self._values is not None

    def _publish(self, values: list[Any], states: list[Any]) -> None:
        with self._lock:
            if self._values is None:
                self._values, self._states = values, states

    def __iter__(self) -> DatasetIterator[T]:
        return _CacheIterator(self)

    def __getstate__(self) -> dict[str, Any]:
        # The cache and its lock stay in this process; a copy starts empty.
        state = self.__dict__.copy()
        state.update(_lock=None, _values=None, _states=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        filled = f"{len(self._values)} elements cached" if self._values is not None else "empty"
        return f"CacheIterDataset({filled})"


class _CacheIterator(DatasetIterator[T]):
    def __init__(self, dataset: CacheIterDataset[T]):
        super().__init__(iter(dataset._parents[0]))
        self._dataset = dataset
        self._parent = self._parents[0]
        self._position = 0
        self._from_cache = dataset._values is not None
        # Filling: what this iterator read from the parent, from its first element on,
        # and the parent's state before and after each element.
        self._values: list[Any] | None = None
        self._states: list[Any] | None = None
        if not self._from_cache:
            self._start_filling()

    def _start_filling(self) -> None:
        self._values, self._states = [], [self._parent.get_state()]

    def __next__(self) -> T:
        if self._from_cache:
            values = self._dataset._values
            assert values is not None
            if self._position >= len(values):
                raise StopIteration
            self._position += 1
            return values[self._position - 1]
        try:
            value = next(self._parent)
        except StopIteration:
            if self._values is not None and self._states is not None:
                self._dataset._publish(self._values, self._states)
                self._values = self._states = None
            raise
        self._position += 1
        if self._values is not None and self._states is not None:
            self._values.append(value)
            self._states.append(self._parent.get_state())
        return value

    def get_state(self) -> dict[str, Any]:
        if self._from_cache:
            states = self._dataset._states
            assert states is not None
            parent = states[self._position]
        elif self._states is not None:
            parent = self._states[-1]
        else:
            parent = self._parent.get_state()
        return {"position": self._position, "parent": parent, "cache_filled": self._from_cache}

    def set_state(self, state: dict[str, Any]) -> None:
        fields = ("position", "parent", "cache_filled")
        check_state(state, repr(self._dataset), fields, flags=("cache_filled",))
        position = state["position"]
        values = self._dataset._values
        if values is not None:
            if position > len(values):
                raise ValueError(
                    f"state['position']={position} is past the end of the cached pass "
                    f"({len(values)} elements): the state is from a different pipeline."
                )
            self._from_cache, self._position = True, position
            return
        self._parent.set_state(state["parent"])
        self._from_cache, self._position = False, position
        self._values = self._states = None
        if position == 0:
            self._start_filling()
        # Else it started mid-pass: what it reads is not a whole pass, so it fills nothing.
