"""ZipMapDataset and ZipIterDataset: tuples of corresponding elements."""

import numpy as np
import pytest

import grain_dataset  # noqa: F401 - registers the transformations
from grain_dataset import (
    MapDataset,
    ReadOptions,
    assert_equal_output_after_checkpoint,
    without_fingerprint,
)
from grain_dataset._map_stages._zip import ZipIterDataset, ZipMapDataset

pytestmark = pytest.mark.timeout(60)


def iter_source(n: int, start: int = 0):
    return MapDataset.range(start, start + n).to_iter_dataset(ReadOptions(num_threads=0))


# -- ZipMapDataset -----------------------------------------------------------------------


def test_map_zips_corresponding_elements():
    ds = ZipMapDataset([MapDataset.range(3), MapDataset.source("abc")])
    assert len(ds) == 3
    assert list(ds) == [(0, "a"), (1, "b"), (2, "c")]
    assert ds[-1] == (2, "c")
    single = ZipMapDataset((MapDataset.range(2),))
    assert list(single) == [(0,), (1,)]


def test_map_unequal_lengths_raise_naming_the_lengths():
    with pytest.raises(ValueError, match=r"equal lengths, got \[3, 5\].*ds\[:3\]"):
        ZipMapDataset([MapDataset.range(3), MapDataset.range(5)])


def test_map_later_epochs_are_the_parents_later_epochs():
    a = MapDataset.range(20).shuffle(seed=1)
    b = MapDataset.range(100, 120).shuffle(seed=2)
    ds = ZipMapDataset([a, b])
    for index in (0, 19, 20, 45, 10**6):
        assert ds[index] == (a[index], b[index])
    assert [ds[i] for i in range(20)] != [ds[i] for i in range(20, 40)]


def test_map_element_path_equals_batched_path():
    ds = ZipMapDataset([MapDataset.range(50).shuffle(seed=3), MapDataset.range(50).map(str)])
    indices = np.random.default_rng(0).integers(0, 200, 100)
    assert ds._getitems(indices) == [ds[int(i)] for i in indices]


def test_map_a_filtered_position_in_any_parent_is_filtered():
    evens = MapDataset.range(10).filter(lambda x: x % 2 == 0)
    ds = ZipMapDataset([MapDataset.range(10, 20), evens])
    assert ds[1] is None
    assert ds._getitems(np.arange(4)) == [(10, 0), None, (12, 2), None]
    assert list(ds) == [(10, 0), (12, 2), (14, 4), (16, 6), (18, 8)]


def test_map_seeded_parents_give_a_seed_to_later_stages():
    ds = ZipMapDataset([MapDataset.range(5).seed(1), MapDataset.range(5).seed(2)])
    shuffled = ds.shuffle()
    assert sorted(shuffled) == list(ds)


def test_map_checkpoint_conformance():
    ds = ZipMapDataset([MapDataset.range(30).shuffle(seed=0), MapDataset.range(30)])
    assert_equal_output_after_checkpoint(ds.to_iter_dataset(ReadOptions(num_threads=0)))


@pytest.mark.parametrize(
    ("parents", "error", "match"),
    [
        (MapDataset.range(3), TypeError, r"must be a list of datasets, like ZipMapDataset\(\["),
        ([], ValueError, "must hold at least one dataset"),
        ([MapDataset.range(3), iter_source(3)], TypeError, "use ZipIterDataset|zip IterDatasets"),
        ([MapDataset.range(3), [1, 2, 3]], TypeError, r"`parents\[1\]` of ZipMapDataset"),
        (None, TypeError, "must be a list of datasets"),
    ],
)
def test_map_bad_parents(parents, error, match):
    with pytest.raises(error, match=match):
        ZipMapDataset(parents)


# -- ZipIterDataset ----------------------------------------------------------------------


def test_iter_not_strict_stops_at_the_first_exhausted_parent():
    ds = ZipIterDataset([iter_source(3), iter_source(10, start=10)], strict=False)
    assert list(ds) == [(0, 10), (1, 11), (2, 12)]
    ds = ZipIterDataset([iter_source(10), iter_source(2, start=10), iter_source(5)], strict=False)
    assert list(ds) == [(0, 10, 0), (1, 11, 1)]
    it = iter(ds)
    list(it)
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize(
    ("lengths", "match"),
    [
        ((3, 10), r"parents\[1\] is longer than parents\[0\]"),
        ((10, 2, 5), r"parents\[1\] ended before parents\[0\]"),
        ((4, 4, 3), r"parents\[2\] ended before parents\[0\]"),
        ((0, 1), r"parents\[1\] is longer"),
    ],
)
def test_iter_strict_by_default_refuses_parents_of_different_lengths(lengths, match):
    ds = ZipIterDataset([iter_source(n, start=10 * i) for i, n in enumerate(lengths)])
    with pytest.raises(ValueError, match=match + ".*strict=False"):
        list(ds)


def test_iter_strict_parents_of_equal_length_end_together():
    ds = ZipIterDataset([iter_source(3), iter_source(3, start=10)], strict=True)
    assert list(ds) == [(0, 10), (1, 11), (2, 12)]
    with pytest.raises(TypeError, match="strict"):
        ZipIterDataset([iter_source(3)], strict=1)


def test_iter_map_parents_are_read_with_to_iter_dataset():
    ds = ZipIterDataset([MapDataset.range(2), iter_source(2, start=5)])
    assert list(ds) == [(0, 5), (1, 6)]


def test_iter_state_lists_the_parents_states():
    it = iter(ZipIterDataset([iter_source(4), iter_source(4, start=4)]))
    next(it)
    assert without_fingerprint(it.get_state()) == {
        "parents": [{"next_index": 1}, {"next_index": 1}]
    }
    assert repr(ZipIterDataset([iter_source(1)])) == "ZipIterDataset(1 parents)"


@pytest.mark.parametrize("lengths", [(6, 6), (4, 9), (9, 4, 7), (0, 3)])
def test_iter_checkpoint_conformance(lengths):
    ds = ZipIterDataset(
        [iter_source(n, start=10 * i) for i, n in enumerate(lengths)],
        strict=len(set(lengths)) == 1,
    )
    assert_equal_output_after_checkpoint(ds)


def test_iter_checkpoint_conformance_with_shuffled_parents():
    ds = ZipIterDataset(
        [
            MapDataset.range(40).shuffle(seed=4).to_iter_dataset(ReadOptions(num_threads=2)),
            iter_source(40).map(lambda x: x * x),
        ]
    )
    assert_equal_output_after_checkpoint(ds, steps=[0, 1, 17, 39, 40])


def test_iter_rejected_state_restores_no_parent():
    it = iter(ZipIterDataset([iter_source(5), iter_source(5)]))
    next(it)
    before = it.get_state()
    with pytest.raises(ValueError, match="must list 2 parent states"):
        it.set_state({"parents": [{"next_index": 3}]})
    with pytest.raises(ValueError, match="expected the keys"):
        it.set_state({"parents": [{"next_index": 3}, {"bad": 1}]})
    assert it.get_state() == before
    assert next(it) == (1, 1)


@pytest.mark.parametrize(
    ("parents", "error", "match"),
    [
        (iter_source(3), TypeError, "must be a list of datasets"),
        ([], ValueError, "must hold at least one dataset"),
        ([iter_source(3), "abc"], TypeError, r"`parents\[1\]` must be an IterDataset"),
    ],
)
def test_iter_bad_parents(parents, error, match):
    with pytest.raises(error, match=match):
        ZipIterDataset(parents)
