"""RebatchIterDataset: the parent's rows, in order, regrouped into batches of `batch_size`.

Checked against the obvious reference (concatenate all parent rows, split
every `batch_size`), for varying parent batch sizes including empty ones;
the checkpoint contract at every step; the state format; that a restore
replays exactly one parent batch; and the errors for bad arguments, bad
parent batches and bad states.
"""

import numpy as np
import pytest

from grain_dataset import (
    DatasetIterator,
    IterDataset,
    MapDataset,
    ReadOptions,
    assert_equal_output_after_checkpoint,
)
from grain_dataset._iter_stages._rebatch import RebatchIterDataset


def tree_batch(start: int, rows: int) -> dict:
    """A parent batch of `rows` rows numbered from `start`, with nested leaves."""
    ids = np.arange(start, start + rows, dtype=np.int64)
    return {
        "id": ids,
        "pair": (ids.astype(np.float32) / 2, np.stack([ids, -ids], axis=1)),
        "none": None,
    }


def batches_of(sizes: list[int]) -> list[dict]:
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
    return [tree_batch(start, rows) for start, rows in zip(starts, sizes, strict=True)]


def parent_of(sizes: list[int], num_threads: int = 0) -> IterDataset:
    return MapDataset.source(batches_of(sizes)).to_iter_dataset(
        ReadOptions(num_threads=num_threads)
    )


def expected_rebatch(sizes: list[int], batch_size: int, drop_remainder: bool) -> list[np.ndarray]:
    rows = np.arange(sum(sizes))
    cuts = list(range(batch_size, len(rows), batch_size))
    out = [part for part in np.split(rows, cuts) if part.size]
    if drop_remainder and out and len(out[-1]) < batch_size:
        out.pop()
    return out


def check_batch(batch: dict, ids: np.ndarray) -> None:
    assert batch["none"] is None
    np.testing.assert_array_equal(batch["id"], ids)
    assert batch["id"].dtype == np.int64
    half, both = batch["pair"]
    np.testing.assert_array_equal(half, ids.astype(np.float32) / 2)
    assert half.dtype == np.float32
    np.testing.assert_array_equal(both, np.stack([ids, -ids], axis=1))


def test_docstring_example():
    ds = MapDataset.range(10).to_iter_dataset().batch(3)
    ds = RebatchIterDataset(ds, batch_size=4)
    assert [b.tolist() for b in ds] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("batch_size", [1, 3, 4, 7, 50])
def test_matches_concatenate_then_split(batch_size, drop_remainder):
    sizes = [3, 0, 5, 1, 1, 8, 0, 2, 6]
    ds = RebatchIterDataset(parent_of(sizes), batch_size, drop_remainder=drop_remainder)
    expected = expected_rebatch(sizes, batch_size, drop_remainder)
    out = list(ds)
    assert len(out) == len(expected)
    for batch, ids in zip(out, expected, strict=True):
        check_batch(batch, ids)


def test_random_sizes_against_reference():
    rng = np.random.default_rng(0)
    for _ in range(20):
        sizes = rng.integers(0, 9, size=rng.integers(1, 12)).tolist()
        batch_size = int(rng.integers(1, 10))
        drop = bool(rng.integers(2))
        out = list(RebatchIterDataset(parent_of(sizes), batch_size, drop))
        expected = expected_rebatch(sizes, batch_size, drop)
        assert [b["id"].tolist() for b in out] == [e.tolist() for e in expected]


def test_container_types_are_kept():
    parent = MapDataset.source([[np.arange(3), (np.ones(3),)], [np.arange(2), (np.zeros(2),)]])
    (first, second) = list(RebatchIterDataset(parent.to_iter_dataset(), 4))
    assert type(first) is list
    assert type(first[1]) is tuple
    assert first[0].tolist() == [0, 1, 2, 0]
    assert first[1][0].tolist() == [1, 1, 1, 0]
    assert second[0].tolist() == [1]


def test_batch_inside_one_parent_batch_is_a_view():
    source = np.arange(8)
    parent = MapDataset.source([source]).to_iter_dataset(ReadOptions(num_threads=0))
    first, second = list(RebatchIterDataset(parent, 4))
    assert np.shares_memory(first, source)
    assert second.tolist() == [4, 5, 6, 7]


def test_empty_parent_gives_no_batches():
    assert list(RebatchIterDataset(parent_of([0, 0]), 3)) == []
    assert list(RebatchIterDataset(parent_of([2]), 3, drop_remainder=True)) == []


# -- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "batch_size", "drop"),
    [
        ([3, 0, 5, 1, 1, 8, 0, 2, 6], 4, False),
        ([3, 0, 5, 1, 1, 8, 0, 2, 6], 4, True),
        ([7, 7, 7], 2, False),
        ([1, 1, 1, 1, 1], 3, False),
        ([10], 1, False),
    ],
)
def test_checkpoint_conformance(sizes, batch_size, drop):
    assert_equal_output_after_checkpoint(RebatchIterDataset(parent_of(sizes), batch_size, drop))


def test_checkpoint_conformance_with_threads_and_a_counting_parent():
    parent = parent_of([4, 2, 9, 0, 3, 5], num_threads=2).map_with_index(
        lambda index, batch: {**batch, "batch_index": np.full(len(batch["id"]), index)}
    )
    assert_equal_output_after_checkpoint(RebatchIterDataset(parent, 3))


def test_chained_rebatches_checkpoint():
    ds = RebatchIterDataset(RebatchIterDataset(parent_of([5, 3, 4, 1]), 3), 2)
    assert [b["id"].tolist() for b in ds] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
        [8, 9],
        [10, 11],
        [12],
    ]
    assert_equal_output_after_checkpoint(ds)


def test_state_format():
    it = iter(RebatchIterDataset(parent_of([3, 3]), 2))
    # Grain's keys and values (probed from Grain 0.2.18).
    assert it.get_state() == {"parent": {"next_index": 0}, "batch_idx": 0}
    next(it)  # rows 0, 1 of parent batch 0
    assert it.get_state() == {"parent": {"next_index": 0}, "batch_idx": 2}
    next(it)  # row 2 of batch 0, row 0 of batch 1
    assert it.get_state() == {"parent": {"next_index": 1}, "batch_idx": 1}
    next(it)  # rows 1, 2 of batch 1: used up, left only when the next batch is read
    used_up = it.get_state()
    assert used_up == {"parent": {"next_index": 1}, "batch_idx": 3}
    with pytest.raises(StopIteration):
        next(it)
    # At the end: the parent's end, the last count kept.
    assert it.get_state() == {"parent": {"next_index": 2}, "batch_idx": 3}
    for state in (used_up, it.get_state()):
        again = iter(RebatchIterDataset(parent_of([3, 3]), 2))
        again.set_state(state)
        assert list(again) == []
    older = iter(RebatchIterDataset(parent_of([3, 3]), 2))
    older.set_state({"parent": {"next_index": 1}, "offset": 1})  # an earlier version's key
    assert [b["id"].tolist() for b in older] == [[4, 5]]


class CountingBatches(IterDataset):
    """Parent batches of the given sizes; counts how many batches its iterators read."""

    def __init__(self, sizes):
        super().__init__()
        self.batches = batches_of(sizes)
        self.reads = 0

    def __iter__(self):
        return CountingIterator(self)


class CountingIterator(DatasetIterator):
    def __init__(self, dataset):
        super().__init__()
        self._dataset = dataset
        self._next = 0

    def __next__(self):
        if self._next >= len(self._dataset.batches):
            raise StopIteration
        self._dataset.reads += 1
        self._next += 1
        return self._dataset.batches[self._next - 1]

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        self._next = state["next"]


def test_restore_reads_no_data_and_replays_one_parent_batch():
    parent = CountingBatches([10, 10])
    ds = RebatchIterDataset(parent, 3)
    state = {"parent": {"next": 1}, "batch_idx": 7}  # row 17 is next
    it = iter(ds)
    it.set_state(state)
    assert parent.reads == 0
    assert it.get_state() == state  # a pending replay still reports the same position
    check_batch(next(it), np.array([17, 18, 19]))
    assert parent.reads == 1
    assert [b["id"].tolist() for b in it] == []


def test_state_survives_a_round_trip_before_the_replay():
    it = iter(RebatchIterDataset(parent_of([4, 4]), 3))
    next(it)
    state = it.get_state()
    other = iter(RebatchIterDataset(parent_of([4, 4]), 3))
    other.set_state(state)
    other.set_state(other.get_state())
    assert [b["id"].tolist() for b in other] == [[3, 4, 5], [6, 7]]


# -- errors -----------------------------------------------------------------------------------


def test_bad_arguments():
    parent = parent_of([2])
    with pytest.raises(ValueError, match="batch_size"):
        RebatchIterDataset(parent, 0)
    with pytest.raises(TypeError, match="batch_size"):
        RebatchIterDataset(parent, 2.0)
    with pytest.raises(TypeError, match="drop_remainder"):
        RebatchIterDataset(parent, 2, drop_remainder=1)
    with pytest.raises(TypeError, match="to_iter_dataset"):
        RebatchIterDataset(MapDataset.range(3), 2)
    with pytest.raises(TypeError, match="IterDataset"):
        RebatchIterDataset([1, 2], 2)


def source_of(batches) -> IterDataset:
    return MapDataset.source(batches).to_iter_dataset(ReadOptions(num_threads=0))


def test_mismatched_leading_dims_name_the_leaf():
    ds = RebatchIterDataset(source_of([{"x": np.zeros(3), "y": [np.zeros(3), np.zeros(2)]}]), 2)
    with pytest.raises(ValueError, match=r"batch\['y'\]\[1\] of a parent batch has 2 rows"):
        next(iter(ds))


def test_non_array_leaf_is_refused():
    ds = RebatchIterDataset(source_of([{"x": np.zeros(3), "label": 5}]), 2)
    with pytest.raises(TypeError, match=r"batch\['label'\].*int, not a numpy array"):
        next(iter(ds))


def test_zero_dimensional_leaf_is_refused():
    ds = RebatchIterDataset(source_of([{"x": np.float32(1.0)}]), 2)
    with pytest.raises((TypeError, ValueError), match=r"batch\['x'\]"):
        next(iter(ds))
    ds = RebatchIterDataset(source_of([{"x": np.array(1.0)}]), 2)
    with pytest.raises(ValueError, match=r"batch\['x'\].*0-d array"):
        next(iter(ds))


def test_batch_without_leaves_is_refused():
    with pytest.raises(ValueError, match="no array leaves"):
        next(iter(RebatchIterDataset(source_of([{"x": None}]), 2)))


def test_structure_change_between_parent_batches():
    batches = [{"x": np.zeros(1)}, {"y": np.zeros(2)}]
    with pytest.raises(ValueError, match="different structures"):
        next(iter(RebatchIterDataset(source_of(batches), 3)))


def test_trailing_shape_change_names_the_leaf():
    batches = [{"x": np.zeros((1, 2))}, {"x": np.zeros((2, 3))}]
    with pytest.raises(ValueError, match=r"batch\['x'\] has rows of different shapes"):
        next(iter(RebatchIterDataset(source_of(batches), 3)))


def test_an_error_keeps_its_place_and_loses_no_rows():
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 3:  # the third parent batch fails once
            raise OSError("transient")
        return batch

    parent = source_of(batches_of([2, 2, 2, 2])).map(flaky)
    it = iter(RebatchIterDataset(parent, 3))
    assert next(it)["id"].tolist() == [0, 1, 2]
    with pytest.raises(OSError, match="transient"):
        next(it)  # needs rows 3 (batch 1) and 4, 5 (batch 2, which fails)
    assert [b["id"].tolist() for b in it] == [[3, 4, 5], [6, 7]]


def test_a_bad_batch_raises_again_on_retry():
    it = iter(RebatchIterDataset(source_of([{"x": np.zeros(2)}, {"x": 3}]), 4))
    for _ in range(2):
        with pytest.raises(TypeError, match="not a numpy array"):
            next(it)


@pytest.mark.parametrize(
    ("state", "error"),
    [
        ({"parent": {"next_index": 0}}, ValueError),
        ({"parent": {"next_index": 0}, "offset": -1}, ValueError),
        ({"parent": {"next_index": 0}, "offset": 1, "extra": 0}, ValueError),
        ([0, 1], TypeError),
    ],
)
def test_malformed_states_are_refused(state, error):
    it = iter(RebatchIterDataset(parent_of([3]), 2))
    with pytest.raises(error, match="RebatchIterDataset"):
        it.set_state(state)


def test_offset_past_the_parent_batch_is_refused():
    it = iter(RebatchIterDataset(parent_of([3, 3]), 2))
    it.set_state({"parent": {"next_index": 0}, "batch_idx": 5})
    with pytest.raises(ValueError, match="skips 5 rows of a parent batch that has only 3"):
        next(it)
