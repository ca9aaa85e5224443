"""The common shape of the built-in IterDataset stages, and their state helpers.

A stage is one `IterStage` subclass (its arguments, `_describe()`) and one
`StageIterator` subclass marked ``@iterator_of(TheStage)``; `__iter__`,
`__repr__` and the iterator's bookkeeping are written once here. A stage whose
state is its parent's (map, filter, batch) writes only `__next__`.

Two patterns recur in stages that keep state of their own:

- Anchor and replay (flat map, window shuffle, packing, concat-then-split,
  rebatch): a stage that holds elements it has read but not yet fully returned
  cannot save them (states are a few integers). It keeps an `Anchor`, the
  parent's state at the last point where it held nothing, and saves that with
  a count; restoring sets the parent back at the anchor, and the stage reads
  forward again and skips what the count says was returned.
- All parents or none (zip, mix): a state with one entry per parent is applied
  with `restore_all`, so a state that one parent refuses leaves every parent
  where it was instead of a half-restored stage.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from grain_dataset._common._contract import IterStageTraits
from grain_dataset._core._base import DatasetIterator, IterDataset


class IterStage(IterDataset[Any], IterStageTraits):
    """Base of the built-in IterDataset stages (see the module docstring).

    `_iterator` is the stage's iterator class (set by `iterator_of`); it is
    built with the stage and the iterator of its one parent, or the list of
    its parents' iterators when `_many_parents` is set. Its traits (position-wise
    work for mp_prefetch, ...) are declared in grain_dataset._common._contract.
    """

    _iterator: ClassVar[type[StageIterator]]

    def __iter__(self) -> DatasetIterator[Any]:
        if self._many_parents:
            return self._iterator(self, [iter(parent) for parent in self._parents])
        return self._iterator(self, iter(self._parents[0]))

    def _describe(self) -> str:
        """The stage's arguments as they appear in its repr, between the parentheses."""
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()})"


class StageIterator(DatasetIterator[Any]):
    """Iterator of an `IterStage`: `_dataset` is its stage, `_parent` its parent's iterator.

    With several parents, `_parent` is the list of their iterators. The state
    is the parent's unless the stage overrides `get_state`/`set_state`. The
    next-index hooks are not inherited: a stage that keeps its parent's
    positions (a map) sets ``_get_next_index = parent_next_index`` and its
    setter itself, so that a filter or batch never passes them on by mistake.
    """

    def __init__(self, dataset: IterStage, parent: Any):
        super().__init__(parent)
        self._dataset = dataset
        self._parent = parent

    def get_state(self) -> dict[str, Any]:
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)


It = TypeVar("It", bound=StageIterator)


def iterator_of(stage: type[IterStage]) -> Callable[[type[It]], type[It]]:
    """Class decorator: the decorated iterator is what ``iter()`` of a `stage` returns."""

    def mark(iterator: type[It]) -> type[It]:
        stage._iterator = iterator
        return iterator

    return mark


class Anchor:
    """The parent's state where a stage last held nothing (see the module docstring).

    `state` is a private copy: a parent may hand out a state it keeps changing.
    With ``now=False`` it starts unset (None), for a stage that sets it before
    it first reads it: creating the iterator then asks the parent for nothing.
    """

    __slots__ = ("_parent", "state")

    def __init__(self, parent: DatasetIterator[Any], *, now: bool = True):
        self._parent = parent
        self.state: Any = parent.get_state() if now else None

    def move(self) -> None:
        """The stage holds nothing now: it would resume right here."""
        self.state = self._parent.get_state()

    def set(self, state: Any) -> None:
        """The stage would resume at `state`, a state the parent gave out earlier."""
        self.state = state

    def saved(self) -> Any:
        """The anchor as it goes into the stage's state."""
        return copy.deepcopy(self.state)

    def restore(self, state: Any) -> None:
        """Sets the parent back at `state`, the anchor of a saved state."""
        self._parent.set_state(state)
        self.state = copy.deepcopy(state)


def check_below(state: dict[str, Any], field: str, bound: int, stage: object, what: str) -> int:
    """`state[field]` after checking it is below `bound`, the stage's argument `what`."""
    value = state[field]
    if value >= bound:
        raise ValueError(
            f"state[{field!r}] of {stage!r} must be < {what} ({bound}), got {value}; the "
            f"state is from a pipeline with another {what}."
        )
    return value


def restore_all(iterators: Sequence[DatasetIterator[Any]], states: Sequence[Any]) -> None:
    """Sets each iterator to its state, or none of them: a refused state changes nothing."""
    previous = [iterator.get_state() for iterator in iterators]
    try:
        for iterator, state in zip(iterators, states, strict=True):
            iterator.set_state(state)
    except Exception:
        for iterator, state in zip(iterators, previous, strict=True):
            iterator.set_state(state)
        raise
