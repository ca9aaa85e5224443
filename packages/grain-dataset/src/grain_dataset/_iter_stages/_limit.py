"""LimitIterDataset: cutting a stream short.

LimitIterDataset returns the first `count` elements of its parent and then
stops without reading further. State, in Grain's keys:
``{"parent": ..., "count_elements_read": returned}`` (earlier versions of this
library wrote ``"count"``; such states restore as well).
"""

from __future__ import annotations

from typing import Any

from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of
from grain_dataset._core._state import check_state, renamed_keys
from grain_index import checks

_COUNT = "count_elements_read"


class LimitIterDataset(IterStage):
    """The first `count` elements of `parent` (all of them if it has fewer).

    A MapDataset parent is read with ``.to_iter_dataset()``.

    Example::

        ds = LimitIterDataset(grain.MapDataset.range(100).to_iter_dataset(), count=3)
        list(ds)  # [0, 1, 2]
    """

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None  # its state counts elements: a new limit applies to the same count

    def __init__(self, parent: IterDataset[Any], count: int):
        super().__init__(as_iter_dataset(parent, "parent"))
        # 0 is refused, as in Grain: an empty pipeline is almost always a mistake.
        self._count = checks.int_in_range(
            count, "count", 1, lead="Count must be a non-negative integer. Got {value}."
        )

    def _describe(self) -> str:
        return f"count={self._count}"


@iterator_of(LimitIterDataset)
class _LimitIterator(StageIterator):
    def __init__(self, dataset: LimitIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._returned = 0

    def __next__(self) -> Any:
        if self._returned >= self._dataset._count:
            raise StopIteration
        value = next(self._parent)
        self._returned += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent.get_state(), _COUNT: self._returned}

    def set_state(self, state: dict[str, Any]) -> None:
        state = renamed_keys(state, {"count": _COUNT})
        check_state(state, repr(self._dataset), ("parent", _COUNT))
        if state[_COUNT] > self._dataset._count:
            raise ValueError(
                f"state[{_COUNT!r}] of {self._dataset!r} must be <= count "
                f"({self._dataset._count}), got {state[_COUNT]}; the state is from a "
                "pipeline with another limit."
            )
        self._parent.set_state(state["parent"])
        self._returned = state[_COUNT]
