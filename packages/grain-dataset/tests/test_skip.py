"""SkipIterDataset: the elements after the first `count`, with exact restores.

`CONFORMANCE` is this stage's entry in the checkpoint-conformance run of
packages/grain-dataset/tests/test_stage_contract.py (which collects the tables of all
stages' test modules); the tests here run the helper over it too.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain_dataset
from grain_dataset import (
    DatasetOptions,
    IterDataset,
    MapDataset,
    ReadOptions,
    SkipIterDataset,
    WithOptionsIterDataset,
    assert_equal_output_after_checkpoint,
)

pytestmark = pytest.mark.timeout(60)


def _odd(x):
    return x % 2 == 1


def _threads(ds):
    return ds.to_iter_dataset(ReadOptions(num_threads=2, prefetch_buffer_size=4))


CONFORMANCE = {
    "skip_after_filter": (
        lambda: SkipIterDataset(_threads(MapDataset.range(30).filter(_odd)), count=4).batch(3),
        None,
    ),
    "skip_everything": (lambda: SkipIterDataset(MapDataset.range(3), count=5), None),
    "skip_in_a_mixture": (
        lambda: IterDataset.mix(
            [SkipIterDataset(MapDataset.range(10), 3), MapDataset.range(100, 104).to_iter_dataset()]
        ),
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(CONFORMANCE))
def test_every_state_restores_exactly(name):
    build, steps = CONFORMANCE[name]
    assert_equal_output_after_checkpoint(build(), steps=steps)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 20), count=st.integers(0, 25), keep=st.integers(1, 4))
def test_it_is_the_parent_without_its_first_count_elements(size, count, keep):
    parent = MapDataset.range(size).filter(lambda x: x % keep == 0).to_iter_dataset()
    assert list(SkipIterDataset(parent, count)) == list(parent)[count:]


def test_a_map_dataset_parent_is_read_as_an_iter_dataset():
    assert list(SkipIterDataset(MapDataset.range(6), 2)) == [2, 3, 4, 5]


def test_it_is_public_where_the_other_stages_are():
    import grain

    assert grain.experimental.SkipIterDataset is SkipIterDataset
    assert grain_dataset.SkipIterDataset is SkipIterDataset
    assert repr(SkipIterDataset(MapDataset.range(3), 2)) == "SkipIterDataset(count=2)"


def test_a_state_before_the_first_element_still_skips():
    it = iter(SkipIterDataset(MapDataset.range(10), 3))
    state = json.loads(json.dumps(it.get_state()))
    assert state["skipped"] == 0
    fresh = iter(SkipIterDataset(MapDataset.range(10), 3))
    fresh.set_state(state)
    assert list(fresh) == [3, 4, 5, 6, 7, 8, 9]


def test_the_state_says_how_many_were_skipped():
    it = iter(SkipIterDataset(MapDataset.range(10), 3))
    next(it)
    assert it.get_state()["skipped"] == 3


@pytest.mark.parametrize("count", [-1, 1.5, "3", None])
def test_a_bad_count_is_refused_by_name(count):
    with pytest.raises((TypeError, ValueError), match="count"):
        SkipIterDataset(MapDataset.range(3), count)


def test_a_parent_that_is_not_a_dataset_is_refused():
    with pytest.raises(TypeError, match="`parent` of SkipIterDataset must be an IterDataset"):
        SkipIterDataset([1, 2, 3], 1)


def test_a_state_of_a_pipeline_that_skips_more_is_refused():
    it = iter(SkipIterDataset(MapDataset.range(10), 5))
    next(it)
    state = it.get_state()
    shorter = iter(SkipIterDataset(MapDataset.range(10), 2))
    with pytest.raises(ValueError, match="must be <= count \\(2\\), got 5"):
        shorter.set_state(state)


@pytest.mark.timeout(120)
def test_under_mp_prefetch_it_gives_the_plain_pipeline():
    import grain_mp

    ds = WithOptionsIterDataset(
        SkipIterDataset(MapDataset.range(40).filter(_odd).to_iter_dataset(), 5).map(
            lambda x: x * 10
        ),
        DatasetOptions(filter_warn_threshold_ratio=None),
    )
    expected = list(ds)
    parallel = ds.mp_prefetch(grain_mp.MultiprocessingOptions(num_workers=2))
    with iter(parallel) as it:
        first = [next(it) for _ in range(4)]
        state = it.get_state()
    with iter(parallel) as it:
        it.set_state(state)
        rest = list(it)
    assert first + rest == expected
