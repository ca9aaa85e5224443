"""An iterator keeps the class its code made: the guard, statistics and close() never swap it.

The guard (one thread at a time, fingerprint stamps, closed iterators) and the
statistics timer hook an iterator's methods per instance (grain_dataset._runtime._guard);
these tests hold the iterator's class fixed through all of them, and check the
behaviour that hooking gives still holds for a user's own iterator classes.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from grain_dataset import (
    DatasetIterator,
    DatasetOptions,
    IterDataset,
    MapDataset,
    ReadOptions,
    WithOptionsIterDataset,
    track_stats,
)
from grain_dataset._common._config import config
from grain_dataset._runtime._fingerprint import KEY


class CountIterator(DatasetIterator):
    """A user's source iterator: 0, 1, ..., stop - 1."""

    def __init__(self, stop):
        super().__init__()
        self._stop = stop
        self._next = 0

    def __next__(self):
        value = self._next
        if value >= self._stop:
            raise StopIteration
        time.sleep(0)  # lets another thread in between the read and the write
        self._next = value + 1
        return value

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        self._next = state["next"]


class TenTimesIterator(CountIterator):
    """A user's subclass whose methods call their base class's: guarded once, counted once."""

    def __next__(self):
        return 10 * super().__next__()

    def get_state(self):
        return {**super().get_state(), "scale": 10}

    def set_state(self, state):
        super().set_state({"next": state["next"]})


class PositionState:
    """get_state and set_state from a class that is no DatasetIterator, first in the MRO."""

    def get_state(self):
        return {"position": self._next}

    def set_state(self, state):
        self._next = state["position"]


class MixedIterator(PositionState, CountIterator):
    pass


class Of(IterDataset):
    """The dataset of `stop` elements that `make(stop)`, a user's iterator class, yields."""

    def __init__(self, make, stop):
        super().__init__()
        self._make, self._stop = make, stop

    def __iter__(self):
        return self._make(self._stop)


def _assert_made_by_code(iterator):
    """Every class in `iterator`'s MRO is the one its module defines under its name."""
    for cls in type(iterator).__mro__:
        found = sys.modules[cls.__module__]
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
        assert found is cls, f"{cls!r} in the MRO of {type(iterator)!r} was made at run time"


def _pipeline_iterators(iterator):
    found, pending = [], [iterator]
    while pending:
        it = pending.pop()
        found.append(it)
        pending.extend(it.parents)
    return found


def _builtin_pipeline():
    return (
        MapDataset.range(40)
        .seed(1)
        .shuffle()
        .to_iter_dataset(ReadOptions(num_threads=0))
        .map(lambda x: x + 1)
        .filter(lambda x: x % 3 != 0)
        .batch(4)
    )


def test_builtin_iterators_keep_their_classes_through_next_state_and_close():
    it = iter(_builtin_pipeline())
    stages = _pipeline_iterators(it)
    classes = [type(stage) for stage in stages]
    assert len(stages) == 4

    def check():
        assert [type(stage) for stage in stages] == classes
        for stage in stages:
            _assert_made_by_code(stage)

    check()
    next(it)
    state = it.get_state()
    assert KEY not in state  # Grain's shape: the fingerprint goes into checkpoint files
    it.set_state(state)
    check()
    it.close()
    with pytest.raises(ValueError, match="closed iterator"):
        next(it)
    check()


def test_statistics_keep_every_stage_class_and_still_count():
    it = iter(_builtin_pipeline())
    classes = [type(stage) for stage in _pipeline_iterators(it)]
    track_stats(it)
    batches = list(it)
    assert [type(stage) for stage in _pipeline_iterators(it)] == classes
    for stage in _pipeline_iterators(it):
        _assert_made_by_code(stage)
    elements = [stage.elements for stage in it.stats().stages]
    kept = sum(len(batch) for batch in batches)
    assert elements == [40, 40, kept, len(batches)]


def test_a_users_iterator_is_of_its_own_class_in_every_role():
    it = iter(Of(CountIterator, 6))
    assert type(it) is CountIterator
    assert type(it).__mro__[:2] == (CountIterator, DatasetIterator)
    _assert_made_by_code(it)
    assert next(it) == 0
    assert it.get_state() == {"next": 1}
    track_stats(it)
    assert next(it) == 1
    assert type(it) is CountIterator
    assert it.stats().stages[0].elements == 1
    it.close()
    assert type(it) is CountIterator
    _assert_made_by_code(it)
    with pytest.raises(ValueError, match=r"closed iterator \(CountIterator\)"):
        next(it)
    assert it.get_state() == {"next": 2}  # a closed iterator says where it was


def test_a_users_iterator_adopted_as_a_parent_keeps_its_class_and_loses_the_guard():
    parent = iter(Of(CountIterator, 5))
    child = iter(Of(CountIterator, 5).map(lambda x: 2 * x))
    adopted = child.parents[0]
    assert type(adopted) is CountIterator
    assert type(parent) is CountIterator
    assert "_call_lock" in parent.__dict__
    assert "_call_lock" not in adopted.__dict__
    assert adopted.get_state() == {"next": 0}
    assert list(child) == [0, 2, 4, 6, 8]
    assert child.get_state() == {"next": 5}
    _assert_made_by_code(adopted)


def test_a_method_calling_its_base_class_method_is_guarded_and_counted_once():
    it = iter(Of(TenTimesIterator, 4))
    assert type(it) is TenTimesIterator
    track_stats(it)
    assert [next(it), next(it)] == [0, 10]
    state = it.get_state()
    assert state == {"next": 2, "scale": 10}
    assert it.stats().stages[0].elements == 2
    fresh = iter(Of(TenTimesIterator, 4))
    fresh.set_state(state)
    assert list(fresh) == [20, 30]
    with pytest.raises(ValueError, match="different pipeline"):
        # A checkpoint file hands set_state the fingerprint with the state.
        iter(Of(TenTimesIterator, 4)).set_state({**state, KEY: "Other"})
    _assert_made_by_code(it)


def test_methods_inherited_from_a_mixin_are_guarded_too():
    it = iter(Of(MixedIterator, 3))
    assert type(it) is MixedIterator
    assert it.get_state() == {"position": 0}
    with pytest.raises(ValueError, match="different pipeline"):
        it.set_state({"position": 1, KEY: "Other"})
    assert next(it) == 0
    it.set_state({"position": 2, KEY: "Of"})
    assert list(it) == [2]


@pytest.mark.timeout(60)
def test_two_threads_on_a_users_iterator_get_distinct_elements():
    n = 400
    it = iter(Of(CountIterator, n))
    taken: list[list[int]] = [[], []]

    def take(out):
        for value in it:
            out.append(value)

    threads = [threading.Thread(target=take, args=(out,)) for out in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(taken[0] + taken[1]) == list(range(n))
    assert type(it) is CountIterator


def test_debug_mode_tracks_a_users_iterators_and_keeps_their_classes():
    config.reset()
    config.update("py_debug_mode", True)
    try:
        it = iter(Of(CountIterator, 5).map(lambda x: x + 1))
    finally:
        config.reset()
    assert list(it) == [1, 2, 3, 4, 5]
    assert [stage.elements for stage in it.stats().stages] == [5, 5]
    assert type(it.parents[0]) is CountIterator
    _assert_made_by_code(it.parents[0])


def test_options_tracking_keeps_classes():
    ds = WithOptionsIterDataset(
        Of(CountIterator, 8).map(lambda x: np.int64(x)),
        DatasetOptions(execution_tracking_mode="stage_timing"),
    )
    it = iter(ds)
    assert sum(1 for _ in it) == 8
    for stage in _pipeline_iterators(it):
        _assert_made_by_code(stage)
    assert type(_pipeline_iterators(it)[-1]) is CountIterator


def test_a_closed_iterator_stays_closed_when_another_adopts_it():
    closed = iter(Of(CountIterator, 4))
    closed.close()

    class Wrap(DatasetIterator):
        def __init__(self, parent):
            super().__init__(parent)
            self._parent = parent

        def __next__(self):
            return next(self._parent)

        def get_state(self):
            return self._parent.get_state()

        def set_state(self, state):
            self._parent.set_state(state)

    wrapper = Wrap(closed)
    assert type(closed) is CountIterator
    with pytest.raises(ValueError, match=r"closed iterator \(CountIterator\)"):
        next(wrapper)
