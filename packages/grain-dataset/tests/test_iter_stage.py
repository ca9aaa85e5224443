"""IterStage, StageIterator and the state helpers: a new stage in a few lines that resumes."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import grain_dataset
from grain_dataset import (
    DatasetIterator,
    MapDataset,
    assert_equal_output_after_checkpoint,
    without_fingerprint,
)
from grain_dataset.extension import (
    Anchor,
    IterStage,
    StageIterator,
    check_below,
    check_state,
    iterator_of,
    restore_all,
)

pytestmark = pytest.mark.timeout(60)


# A stage written the way docs/contributing.md says: the stage, its iterator.
class PairUp(IterStage):
    """Pairs of consecutive elements; a last odd element comes alone."""

    def __init__(self, parent: Any, *, keep_odd: bool = True):
        super().__init__(parent)
        self._keep_odd = keep_odd

    def _describe(self) -> str:
        return f"keep_odd={self._keep_odd}"


@iterator_of(PairUp)
class _PairUpIterator(StageIterator):
    def __next__(self) -> Any:
        first = next(self._parent)
        try:
            return (first, next(self._parent))
        except StopIteration:
            if self._dataset._keep_odd:
                return (first,)
            raise


# A stage that holds elements: it reads three ahead and returns them reversed.
class ReverseThrees(IterStage):
    def _describe(self) -> str:
        return ""


@iterator_of(ReverseThrees)
class _ReverseThreesIterator(StageIterator):
    def __init__(self, dataset: ReverseThrees, parent: Any):
        super().__init__(dataset, parent)
        self._anchor = Anchor(parent)
        self._held: list[Any] = []
        self._emitted = 0

    def _fill(self) -> None:
        while len(self._held) < 3:
            try:
                self._held.append(next(self._parent))
            except StopIteration:
                break

    def __next__(self) -> Any:
        if not self._held:
            self._fill()
            if not self._held:
                raise StopIteration
            self._held.reverse()
            del self._held[: self._emitted]  # after a restore: what was returned already
        value = self._held.pop(0)
        self._emitted += 1
        if not self._held:
            self._anchor.move()
            self._emitted = 0
        return value

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._anchor.saved(), "emitted": self._emitted}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("parent", "emitted"))
        emitted = check_below(state, "emitted", 3, self._dataset, "group size")
        self._anchor.restore(state["parent"])
        self._held, self._emitted = [], emitted


def test_a_stage_is_a_class_and_its_iterator():
    ds = PairUp(MapDataset.range(5).to_iter_dataset())
    assert list(ds) == [(0, 1), (2, 3), (4,)]
    assert repr(ds) == "PairUp(keep_odd=True)"
    assert type(iter(ds)).__name__ == "_PairUpIterator"
    assert list(PairUp(MapDataset.range(5).to_iter_dataset(), keep_odd=False)) == [(0, 1), (2, 3)]


def test_a_stage_without_state_of_its_own_resumes_through_its_parent():
    ds = PairUp(MapDataset.range(11).shuffle(seed=3).to_iter_dataset())
    assert_equal_output_after_checkpoint(ds)


def test_an_anchored_stage_resumes_anywhere():
    ds = ReverseThrees(MapDataset.range(10).to_iter_dataset())
    assert list(ds) == [2, 1, 0, 5, 4, 3, 8, 7, 6, 9]
    assert_equal_output_after_checkpoint(ds)


def test_the_anchor_is_a_copy_the_caller_cannot_change():
    ds = ReverseThrees(MapDataset.range(10).to_iter_dataset())
    it = iter(ds)
    next(it)
    state = it.get_state()
    state["parent"].clear()  # a caller scribbling on a state it was given
    assert it.get_state() != state
    it.set_state(it.get_state())
    assert list(it) == [1, 0, 5, 4, 3, 8, 7, 6, 9]


def test_check_below_names_the_argument():
    it = iter(ReverseThrees(MapDataset.range(10).to_iter_dataset()))
    state = without_fingerprint(it.get_state())
    with pytest.raises(ValueError, match=r"state\['emitted'\] .* must be < group size \(3\)"):
        it.set_state({**state, "emitted": 3})


class _Refuses(DatasetIterator[Any]):
    def __init__(self) -> None:
        super().__init__()
        self.position = 0

    def __next__(self) -> Any:
        self.position += 1
        return self.position

    def get_state(self) -> dict[str, Any]:
        return {"position": self.position}

    def set_state(self, state: dict[str, Any]) -> None:
        if state["position"] < 0:
            raise ValueError("negative")
        self.position = state["position"]


def test_restore_all_moves_every_parent_or_none():
    parents = [_Refuses(), _Refuses(), _Refuses()]
    for parent in parents:
        next(parent)
    with pytest.raises(ValueError, match="negative"):
        restore_all(parents, [{"position": 7}, {"position": 8}, {"position": -1}])
    assert [parent.position for parent in parents] == [1, 1, 1]
    restore_all(parents, [{"position": 7}, {"position": 8}, {"position": 9}])
    assert [parent.position for parent in parents] == [7, 8, 9]


def test_zip_and_mix_restore_all_parents_or_none():
    zipped = grain_dataset.ZipIterDataset(
        [MapDataset.range(5).to_iter_dataset(), MapDataset.range(5).to_iter_dataset()]
    )
    it = iter(zipped)
    next(it)
    good = without_fingerprint(it.get_state())
    next(it)
    bad = {"parents": [good["parents"][0], {"not": "a state"}]}
    with pytest.raises((ValueError, TypeError)):
        it.set_state(bad)
    assert next(it) == (2, 2)  # neither parent moved


def _stages() -> list[Any]:
    ds = MapDataset.range(20)
    it = ds.to_iter_dataset()
    return [
        it.map(str),
        it.filter(bool),
        it.batch(2),
        it.seed(1),
        it.random_map(lambda x, rng: x, seed=1),
        grain_dataset.LimitIterDataset(it, 3),
        grain_dataset.RepeatIterDataset(it, 2),
        grain_dataset.WindowShuffleIterDataset(it, window_size=3, seed=1),
        grain_dataset.ZipIterDataset([it, it]),
        grain_dataset.RebatchIterDataset(it.batch(2), batch_size=3),
        grain_dataset.WithOptionsIterDataset(it, grain_dataset.DatasetOptions()),
    ]


@pytest.mark.parametrize("stage", _stages(), ids=lambda s: type(s).__name__)
def test_every_stage_describes_itself_the_same_way(stage):
    # One convention: the class name and the stage's arguments, never an address.
    text = repr(stage)
    assert text.startswith(type(stage).__name__ + "(")
    assert text.endswith(")")
    assert " at 0x" not in text
    assert isinstance(stage, IterStage)
    assert "__repr__" not in type(stage).__dict__  # written once, in IterStage
    assert not inspect.isabstract(type(stage))
