"""Repeating a dataset: MapDataset.repeat and RepeatIterDataset.

MapDataset.repeat only changes the length, since indices past one epoch
already mean later epochs; with ``reseed_each_epoch=False`` it maps every epoch
back onto the first, so shuffles and random maps repeat too.

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

import numpy as np

from grain_dataset._core._base import (
    INFINITE,
    DatasetIterator,
    IterDataset,
    MapDataset,
    as_iter_dataset,
    register,
)
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of
from grain_dataset._core._stage import MapStage, is_infinite
from grain_dataset._core._state import check_state
from grain_dataset._runtime._fingerprint import token
from grain_index import checks


@register("repeat")
class RepeatMapDataset(MapStage):
    """`num_epochs` epochs of the parent, or infinitely many (length sys.maxsize)."""

    def _fingerprint_token(self) -> str | None:
        return token("repeat", self._num_epochs, self._reseed)

    def __init__(
        self,
        parent: MapDataset[Any],
        num_epochs: int | None = None,
        reseed_each_epoch: bool = True,
    ):
        super().__init__(parent)
        if not isinstance(reseed_each_epoch, bool):
            raise TypeError(f"`reseed_each_epoch` must be a bool, got {reseed_each_epoch!r}.")
        length = len(parent)
        if is_infinite(length):
            raise ValueError(
                f"Repeating already infinite dataset {parent!r} does nothing. "
                "Cannot repeat an infinite dataset (its length is sys.maxsize already): "
                "remove one of the .repeat() calls."
            )
        if num_epochs is not None:
            num_epochs = checks.int_in_range(
                num_epochs, "num_epochs", 1, lead="num_epochs must be positive, but got {value}."
            )
        if length == 0:
            self._length = 0  # any number of epochs of nothing, as in Grain
        elif num_epochs is None:
            self._length = INFINITE
        else:
            self._length = min(INFINITE, length * num_epochs)
        self._num_epochs = num_epochs
        self._parent = parent
        # Every epoch reads the parent's first: the same order and random numbers again.
        self._fold = None if reseed_each_epoch or not length else length
        self._reseed = reseed_each_epoch

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        if self._fold is not None:
            index %= self._fold
        return self._parent._getitem(index)

    _maps_indices = True

    def _parent_indices(self, indices: np.ndarray) -> np.ndarray | None:
        return indices % self._fold if self._fold is not None else indices

    def _describe(self) -> str:
        extra = "" if self._reseed else ", reseed_each_epoch=False"
        return f"num_epochs={self._num_epochs}{extra}"


class RepeatIterDataset(IterStage):
    """`parent` again and again: `num_epochs` times, or without end if None.

    Every epoch repeats the parent's elements in the same order. An empty
    parent makes an empty dataset (also for ``num_epochs=None``) rather than
    an endless wait. A MapDataset parent is read with ``.to_iter_dataset()``.

    Example::

        ds = RepeatIterDataset(grain.MapDataset.range(3).to_iter_dataset(), num_epochs=2)
        list(ds)  # [0, 1, 2, 0, 1, 2]
    """

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None  # its state counts epochs: a new count applies to the same epoch

    def __init__(self, parent: IterDataset[Any], num_epochs: int | None = None):
        super().__init__(as_iter_dataset(parent, "parent"))
        if num_epochs is not None:
            num_epochs = checks.int_in_range(
                num_epochs, "num_epochs", 1, lead="num_epochs must be positive, but got {value}."
            )
        self._num_epochs = num_epochs

    def _describe(self) -> str:
        return f"num_epochs={self._num_epochs}"


@iterator_of(RepeatIterDataset)
class _RepeatIterator(StageIterator):
    def __init__(self, dataset: RepeatIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
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
        return {"parent": self._parent.get_state(), "epoch": self._epoch}  # Grain's order

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
