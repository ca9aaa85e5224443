"""LimitIterDataset and RepeatIterDataset."""

import itertools

import pytest

import grain_dataset  # noqa: F401 - registers the transformations
from grain_dataset import (
    LimitIterDataset,
    MapDataset,
    ReadOptions,
    RepeatIterDataset,
    assert_equal_output_after_checkpoint,
)

pytestmark = pytest.mark.timeout(60)


def iter_source(n: int):
    return MapDataset.range(n).to_iter_dataset(ReadOptions(num_threads=0))


class Counting:
    """A map function counting how many elements the parent produced."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x


# -- LimitIterDataset --------------------------------------------------------------------


def test_limit_returns_the_first_count_elements_and_reads_no_further():
    counting = Counting()
    ds = LimitIterDataset(iter_source(100).map(counting), count=3)
    assert list(ds) == [0, 1, 2]
    assert counting.calls == 3
    assert list(LimitIterDataset(iter_source(2), 5)) == [0, 1]
    assert list(LimitIterDataset(MapDataset.range(5), 2)) == [0, 1]  # a MapDataset parent


def test_limit_state():
    it = iter(LimitIterDataset(iter_source(10), count=4))
    assert it.get_state() == {"parent": {"next_index": 0}, "count_elements_read": 0}
    next(it)
    next(it)
    assert it.get_state() == {"parent": {"next_index": 2}, "count_elements_read": 2}
    assert repr(LimitIterDataset(iter_source(1), 1)) == "LimitIterDataset(count=1)"


@pytest.mark.parametrize(("n", "count"), [(10, 4), (3, 7), (5, 1), (6, 6)])
def test_limit_checkpoint_conformance(n, count):
    assert_equal_output_after_checkpoint(LimitIterDataset(iter_source(n), count))


@pytest.mark.parametrize(
    ("count", "error", "match"),
    [
        (-1, ValueError, "`count` must be >= 1, got -1"),
        (0, ValueError, "`count` must be >= 1, got 0"),
        (1.5, TypeError, "`count` must be an integer"),
        (True, TypeError, "`count` must be an integer"),
        (None, TypeError, "`count` must be an integer"),
    ],
)
def test_limit_bad_count(count, error, match):
    with pytest.raises(error, match=match):
        LimitIterDataset(iter_source(3), count)


def test_limit_bad_state():
    it = iter(LimitIterDataset(iter_source(10), count=4))
    with pytest.raises(
        ValueError, match=r"state\['count_elements_read'\] .* must be <= count \(4\)"
    ):
        it.set_state({"parent": {"next_index": 5}, "count_elements_read": 5})
    with pytest.raises(  # an earlier version's key, checked the same way
        ValueError, match=r"state\['count_elements_read'\] .* must be <= count \(4\)"
    ):
        it.set_state({"count": 5, "parent": {"next_index": 5}})
    with pytest.raises(ValueError, match="expected the keys"):
        it.set_state({"parent": {"next_index": 5}})


# -- RepeatIterDataset -------------------------------------------------------------------


def test_repeat_num_epochs():
    assert list(RepeatIterDataset(iter_source(3), num_epochs=2)) == [0, 1, 2, 0, 1, 2]
    assert list(RepeatIterDataset(iter_source(3), num_epochs=1)) == [0, 1, 2]
    assert list(RepeatIterDataset(MapDataset.range(2), 3)) == [0, 1, 0, 1, 0, 1]


def test_repeat_forever_and_every_epoch_in_the_same_order():
    shuffled = MapDataset.range(5).shuffle(seed=1).to_iter_dataset(ReadOptions(num_threads=0))
    ds = RepeatIterDataset(shuffled)
    head = list(itertools.islice(ds, 23))
    epoch = list(shuffled)
    assert head == (epoch * 5)[:23]
    assert repr(ds) == "RepeatIterDataset(num_epochs=None)"


@pytest.mark.parametrize("num_epochs", [None, 1, 3])
def test_repeat_of_an_empty_parent_ends_instead_of_looping(num_epochs):
    it = iter(RepeatIterDataset(iter_source(0), num_epochs))
    assert list(it) == []
    state = it.get_state()
    with pytest.raises(StopIteration):
        next(it)
    assert it.get_state() == state  # the state stops changing at the end


def test_repeat_of_a_parent_that_becomes_empty_downstream_ends():
    ds = RepeatIterDataset(iter_source(10).filter(lambda x: x > 100))
    with pytest.warns(UserWarning, match="dropped 10 of 10"):
        assert list(ds) == []


def test_repeat_state():
    it = iter(RepeatIterDataset(iter_source(3), num_epochs=2))
    assert it.get_state() == {"parent": {"next_index": 0}, "epoch": 0}
    for _ in range(4):
        next(it)
    assert it.get_state() == {"parent": {"next_index": 1}, "epoch": 1}
    list(it)
    assert it.get_state() == {"parent": {"next_index": 3}, "epoch": 2}
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize(("n", "num_epochs"), [(4, 3), (1, 5), (0, 2), (5, 1)])
def test_repeat_checkpoint_conformance(n, num_epochs):
    assert_equal_output_after_checkpoint(RepeatIterDataset(iter_source(n), num_epochs))


def test_repeat_forever_checkpoint_conformance():
    ds = RepeatIterDataset(
        MapDataset.range(7).shuffle(seed=2).to_iter_dataset(ReadOptions(num_threads=2))
    )
    assert_equal_output_after_checkpoint(ds, max_steps=30)
    assert_equal_output_after_checkpoint(LimitIterDataset(ds, 16))


@pytest.mark.parametrize(
    ("num_epochs", "error", "match"),
    [
        (0, ValueError, "`num_epochs` must be >= 1, got 0"),
        (-2, ValueError, "`num_epochs` must be >= 1"),
        (2.0, TypeError, "`num_epochs` must be an integer"),
        ("3", TypeError, "`num_epochs` must be an integer"),
    ],
)
def test_repeat_bad_num_epochs(num_epochs, error, match):
    with pytest.raises(error, match=match):
        RepeatIterDataset(iter_source(3), num_epochs)


def test_repeat_bad_state_and_parent():
    it = iter(RepeatIterDataset(iter_source(3), num_epochs=2))
    with pytest.raises(ValueError, match=r"must be <= num_epochs \(2\)"):
        it.set_state({"epoch": 3, "parent": {"next_index": 0}})
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        it.set_state({"epoch": -1, "parent": {"next_index": 0}})
    with pytest.raises(TypeError, match="`parent` must be an IterDataset"):
        RepeatIterDataset(range(3))
