"""Limit and repeat for IterDatasets: cutting a stream short, or running it again.

LimitIterDataset returns the first `count` elements of its parent and then
stops without reading further. State: ``{"count": returned, "parent": ...}``.

RepeatIterDataset runs its parent `num_epochs` times (None: without end). An
epoch restarts the parent's iterator at its initial state, so every epoch of
an IterDataset has the same elements in the same order; to draw a new shuffle
each epoch, repeat the MapDataset before ``to_iter_dataset()`` instead.
State: ``{"epoch": e, "parent": the parent's state within epoch e}``.

An epoch that produces no element ends the repeat, even with
``num_epochs=None``: every later epoch would be empty too, and waiting for
one would hang the pipeline forever.
"""

from __future__ import annotations

from typing import Any

from grain_dataset._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._state import check_state
from grain_index import checks


class LimitIterDataset(IterDataset[Any]):
    """The first `count` elements of `parent` (all of them if it has fewer).

    A MapDataset parent is read with ``.to_iter_dataset()``.

    Example::

        ds = LimitIterDataset(grain.MapDataset.range(100).to_iter_dataset(), count=3)
        list(ds)  # [0, 1, 2]
    """

    def _fingerprint_token(self) -> str | None:
        return None  # its state counts elements: a new limit applies to the same count

    def __init__(self, parent: IterDataset[Any], count: int):
        super().__init__(as_iter_dataset(parent, "parent"))
        # 0 is refused, as in Grain: an empty pipeline is almost always a mistake.
        self._count = checks.int_in_range(count, "count", 1)

    def __iter__(self) -> DatasetIterator[Any]:
        return _LimitIterator(self, iter(self._parents[0]))

    def __repr__(self) -> str:
        return f"LimitIterDataset(count={self._count})"


class _LimitIterator(DatasetIterator[Any]):
    def __init__(self, dataset: LimitIterDataset, parent: DatasetIterator[Any]):
        super().__init__(parent)
        self._dataset = dataset
        self._parent = parent
        self._returned = 0

    def __next__(self) -> Any:
        if self._returned >= self._dataset._count:
            raise StopIteration
        value = next(self._parent)
        self._returned += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return {"count": self._returned, "parent": self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("count", "parent"))
        if state["count"] > self._dataset._count:
            raise ValueError(
                f"state['count'] of {self._dataset!r} must be <= count "
                f"({self._dataset._count}), got {state['count']}; the state is from a "
                "pipeline with another limit."
            )
        self._parent.set_state(state["parent"])
        self._returned = state["count"]


class RepeatIterDataset(IterDataset[Any]):
    """`parent` again and again: `num_epochs` times, or without end if None.

    Every epoch repeats the parent's elements in the same order. An empty
    parent makes an empty dataset (also for ``num_epochs=None``) rather than
    an endless wait. A MapDataset parent is read with ``.to_iter_dataset()``.

    Example::

        ds = RepeatIterDataset(grain.MapDataset.range(3).to_iter_dataset(), num_epochs=2)
        list(ds)  # [0, 1, 2, 0, 1, 2]
    """

    def _fingerprint_token(self) -> str | None:
        return None  # its state counts epochs: a new count applies to the same epoch

    def __init__(self, parent: IterDataset[Any], num_epochs: int | None = None):
        super().__init__(as_iter_dataset(parent, "parent"))
        if num_epochs is not None:
            num_epochs = checks.int_in_range(num_epochs, "num_epochs", 1)
        self._num_epochs = num_epochs

    def __iter__(self) -> DatasetIterator[Any]:
        return _RepeatIterator(self, iter(self._parents[0]))

    def __repr__(self) -> str:
        return f"RepeatIterDataset(num_epochs={self._num_epochs})"


class _RepeatIterator(DatasetIterator[Any]):
    def __init__(self, dataset: RepeatIterDataset, parent: DatasetIterator[Any]):
        super().__init__(parent)
        self._dataset = dataset
        self._parent = parent
        # Epochs restart the same iterator at its initial state: a new iterator
        # per epoch would leave its predecessor's threads to the garbage collector.
        self._initial = parent.get_state()
        self._epoch = 0

    def _done(self) -> bool:
        num_epochs = self._dataset._num_epochs
        return num_epochs is not None and self._epoch >= num_epochs

    def __next__(self) -> Any:
        if self._done():
            raise StopIteration
        try:
            return next(self._parent)
        except StopIteration:
            pass
        self._epoch += 1
        if self._done():
            raise StopIteration
        self._parent.set_state(self._initial)
        try:
            return next(self._parent)
        except StopIteration:
            # An epoch that is empty from its start: all of them are, so stop
            # here rather than loop forever. Back to the previous epoch's end,
            # so that the state stops changing once the repeat has ended.
            self._epoch -= 1
            raise

    def get_state(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "parent": self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("epoch", "parent"))
        num_epochs = self._dataset._num_epochs
        if num_epochs is not None and state["epoch"] > num_epochs:
            raise ValueError(
                f"state['epoch'] of {self._dataset!r} must be <= num_epochs ({num_epochs}), "
                f"got {state['epoch']}; the state is from a pipeline with more epochs."
            )
        self._parent.set_state(state["parent"])
        self._epoch = state["epoch"]
