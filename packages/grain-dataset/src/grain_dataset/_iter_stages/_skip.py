"""SkipIterDataset: a stream without its first elements.

The counterpart of LimitIterDataset: ``SkipIterDataset(ds, count)`` drops the
first `count` elements of `ds` and returns the rest, as tf.data's ``skip``
does. Where the parent is a MapDataset, slicing (``ds[count:]``) skips without
reading; after a filter or any stage that changes the number of elements, the
elements must be read and dropped, which is what this stage does, on the first
``next()``.

State: ``{"parent": ..., "skipped": k}``, k the elements dropped so far (it
reaches `count` with the first element returned, and stays there). A state
taken before the first ``next()`` restores to a stage that still has to skip.
"""

from __future__ import annotations

from typing import Any

from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of
from grain_dataset._core._state import check_state
from grain_dataset._runtime._fingerprint import token
from grain_index import checks

_SKIPPED = "skipped"


class SkipIterDataset(IterStage):
    """The elements of `parent` after its first `count` (none if it has no more).

    A MapDataset parent is read with ``.to_iter_dataset()``; on a MapDataset
    without filters, ``ds[count:]`` skips without reading the elements.

    Example::

        ds = SkipIterDataset(grain.MapDataset.range(6).to_iter_dataset(), count=4)
        list(ds)  # [4, 5]
    """

    # One parent, a state of its own integers: mp_prefetch runs it on the merged
    # stream, after the workers' position-wise stages.
    _positional_chain = True

    def __init__(self, parent: IterDataset[Any], count: int):
        super().__init__(as_iter_dataset(parent, "parent", "SkipIterDataset"))
        self._count = checks.int_in_range(count, "count", 0)

    def _fingerprint_token(self) -> str | None:
        return token("skip", self._count)  # another count moves every position

    def _describe(self) -> str:
        return f"count={self._count}"


@iterator_of(SkipIterDataset)
class _SkipIterator(StageIterator):
    _dataset: SkipIterDataset

    def __init__(self, dataset: SkipIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._skipped = 0

    def __next__(self) -> Any:
        count = self._dataset._count
        while self._skipped < count:
            next(self._parent)  # StopIteration: the parent had no more than `count`
            self._skipped += 1
        return next(self._parent)

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent.get_state(), _SKIPPED: self._skipped}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("parent", _SKIPPED))
        if state[_SKIPPED] > self._dataset._count:
            raise ValueError(
                f"state[{_SKIPPED!r}] of {self._dataset!r} must be <= count "
                f"({self._dataset._count}), got {state[_SKIPPED]}; the state is from a "
                "pipeline that skips more elements."
            )
        self._parent.set_state(state["parent"])
        self._skipped = state[_SKIPPED]
