"""DatasetOptions and WithOptionsIterDataset: the filter-ratio warning and error.

A filter is either a MapDataset filter (its None positions are counted by
`to_iter_dataset`) or an IterDataset filter; both obey the pipeline's options.
Warnings are errors in this test suite, so a test that merely iterates also
proves that nothing warned.
"""

import dataclasses
import math
import warnings

import pytest

from grain_dataset import (
    DatasetOptions,
    IterDataset,
    MapDataset,
    ReadOptions,
    WithOptionsIterDataset,
)
from grain_dataset._common._options import MIN_FILTER_CHECK

pytestmark = pytest.mark.timeout(60)

WARN = "filter_warn_threshold_ratio"
RAISE = "filter_raise_threshold_ratio"


def drops(share_kept: int, n: int = 2000, where: str = "map", num_threads: int = 0) -> IterDataset:
    """A pipeline of `n` elements whose filter keeps 1 in `share_kept`."""

    def keep(x):
        return x % share_kept == 0

    read = ReadOptions(num_threads=num_threads)
    if where == "map":
        return MapDataset.range(n).filter(keep).to_iter_dataset(read)
    return MapDataset.range(n).to_iter_dataset(read).filter(keep)


def with_options(ds, **fields):
    return WithOptionsIterDataset(ds, DatasetOptions(**fields))


def run_recording(ds):
    """(elements, warnings) of one run, every warning recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = list(ds)
    return values, [w for w in caught if issubclass(w.category, UserWarning)]


WHERE = ["map", "iter"]
CASES = [("map", 0), ("map", 4), ("iter", 0), ("iter", 4)]


# -- DatasetOptions ------------------------------------------------------------------------------


def test_defaults():
    options = DatasetOptions()
    assert options.filter_warn_threshold_ratio == 0.9
    assert options.filter_raise_threshold_ratio is None


@pytest.mark.parametrize("field", [WARN, RAISE])
@pytest.mark.parametrize("value", [0, 0.0, 0.25, 1, 1.0, None])
def test_accepts_ratios_in_the_unit_interval_and_none(field, value):
    options = DatasetOptions(**{field: value})
    assert getattr(options, field) == value


@pytest.mark.parametrize("field", [WARN, RAISE])
@pytest.mark.parametrize("value", [-0.01, 1.01, 2, -1, math.nan, math.inf])
def test_rejects_ratios_outside_the_unit_interval(field, value):
    with pytest.raises(ValueError, match=field):
        DatasetOptions(**{field: value})


@pytest.mark.parametrize("field", [WARN, RAISE])
@pytest.mark.parametrize("value", ["0.5", [0.5], True, b"1"])
def test_rejects_ratios_of_the_wrong_type(field, value):
    with pytest.raises(TypeError, match=field):
        DatasetOptions(**{field: value})


def test_options_are_immutable():
    options = DatasetOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.filter_warn_threshold_ratio = 0.5


def test_with_options_rejects_bad_arguments():
    with pytest.raises(TypeError):
        WithOptionsIterDataset([1, 2], DatasetOptions())
    # A MapDataset is read with to_iter_dataset(), as Grain accepts it.
    assert list(WithOptionsIterDataset(MapDataset.range(3), DatasetOptions())) == [0, 1, 2]
    with pytest.raises(TypeError):
        WithOptionsIterDataset(MapDataset.range(3).to_iter_dataset(), {RAISE: 0.5})


def test_with_options_changes_neither_elements_nor_state():
    ds = MapDataset.range(30).shuffle(seed=2).to_iter_dataset(ReadOptions(num_threads=4))
    wrapped = with_options(ds, **{WARN: None, RAISE: 1.0})
    plain_it, wrapped_it = iter(ds), iter(wrapped)
    for _ in range(30):
        assert next(wrapped_it) == next(plain_it)
        assert wrapped_it.get_state() == plain_it.get_state()
    plain_it.close()
    wrapped_it.close()


# -- warnings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "num_threads"), CASES)
def test_a_filter_dropping_most_elements_warns_once(where, num_threads):
    values, caught = run_recording(drops(20, where=where, num_threads=num_threads))
    assert values == list(range(0, 2000, 20))
    assert len(caught) == 1
    assert WARN in str(caught[0].message)


@pytest.mark.parametrize(("where", "num_threads"), CASES)
def test_the_warning_is_a_user_warning(where, num_threads):
    with pytest.warns(UserWarning, match=WARN):
        list(drops(20, where=where, num_threads=num_threads))


@pytest.mark.parametrize(("where", "num_threads"), CASES)
def test_a_filter_dropping_less_than_the_threshold_is_quiet(where, num_threads):
    # Drops 80%: below the default 90%. (Warnings are errors here.)
    assert len(list(drops(5, where=where, num_threads=num_threads))) == 400


@pytest.mark.parametrize("where", WHERE)
def test_no_warning_when_the_warn_threshold_is_none(where):
    assert len(list(with_options(drops(50, where=where), **{WARN: None}))) == 40


@pytest.mark.parametrize("where", WHERE)
def test_a_lower_warn_threshold_warns_at_a_lower_drop_ratio(where):
    with pytest.warns(UserWarning, match=WARN):
        list(with_options(drops(5, where=where), **{WARN: 0.5}))


@pytest.mark.parametrize("where", WHERE)
def test_ratios_are_checked_only_after_min_filter_check_elements(where):
    # All but one element dropped, but too few seen to judge.
    few = drops(10_000, n=MIN_FILTER_CHECK - 1, where=where)
    assert list(few) == [0]
    assert list(with_options(few, **{RAISE: 0.0})) == [0]
    # The same filter over more elements is judged.
    many = drops(10_000, n=3 * MIN_FILTER_CHECK, where=where)
    with pytest.warns(UserWarning, match=WARN):
        assert list(many) == [0]


# -- an epoch that drops everything, however short ------------------------------------------------


def drops_all(where: str, n: int = 50) -> IterDataset:
    """`n` elements, every one dropped: by a filter, or as None records of the source."""
    if where == "none":
        return MapDataset.source([None] * n).to_iter_dataset()
    if where == "map":
        return MapDataset.range(n).filter(lambda x: False).to_iter_dataset()
    return MapDataset.range(n).to_iter_dataset().filter(lambda x: False)


ALL_DROPPED = ["none", "map", "iter"]


@pytest.mark.parametrize("where", ALL_DROPPED)
@pytest.mark.parametrize("n", [1, 50, MIN_FILTER_CHECK - 1])
def test_an_epoch_that_drops_every_element_warns_whatever_its_size(where, n):
    values, caught = run_recording(drops_all(where, n))
    assert values == []
    assert len(caught) == 1
    assert f"dropped {n} of {n} elements (100.0%)" in str(caught[0].message)


@pytest.mark.parametrize("where", ALL_DROPPED)
def test_an_epoch_that_drops_every_element_raises_under_a_raise_threshold(where):
    with pytest.raises(ValueError, match=f"dropped 50 of 50 elements.*{RAISE}=0.5"):
        list(with_options(drops_all(where), **{RAISE: 0.5}))


@pytest.mark.parametrize("where", ALL_DROPPED)
def test_an_epoch_that_drops_every_element_obeys_the_thresholds(where):
    # A threshold of 1.0 is never exceeded, and None turns the check off.
    assert list(with_options(drops_all(where), **{WARN: 1.0, RAISE: 1.0})) == []
    assert list(with_options(drops_all(where), **{WARN: None})) == []


@pytest.mark.parametrize("where", ALL_DROPPED)
def test_a_leading_run_of_drops_is_judged_before_the_end(where):
    # 10 000 elements: the first MIN_FILTER_CHECK and more are dropped, the rest kept.
    n = 10_000
    keep = 3 * MIN_FILTER_CHECK
    if where == "none":
        ds = MapDataset.source([None] * keep + list(range(n - keep))).to_iter_dataset()
    elif where == "map":
        ds = MapDataset.range(n).filter(lambda x: x >= keep).to_iter_dataset()
    else:
        ds = MapDataset.range(n).to_iter_dataset().filter(lambda x: x >= keep)
    it = iter(with_options(ds, **{RAISE: 0.5}))
    with pytest.raises(ValueError, match=RAISE):
        next(it)


@pytest.mark.parametrize("where", WHERE)
def test_a_short_epoch_that_keeps_one_element_is_quiet(where):
    # 49 of 50 dropped: not everything, and too few to judge a ratio.
    assert list(drops(50, n=50, where=where)) == [0]


@pytest.mark.parametrize("where", ALL_DROPPED)
def test_a_restored_iterator_whose_rest_is_all_dropped_is_quiet(where):
    # Only the last elements of the epoch are left, and they are all dropped: legitimate.
    if where == "none":
        ds = MapDataset.source([0, 1, None, None]).to_iter_dataset()
    elif where == "map":
        ds = MapDataset.range(4).filter(lambda x: x < 2).to_iter_dataset()
    else:
        ds = MapDataset.range(4).to_iter_dataset().filter(lambda x: x < 2)
    it = iter(ds)
    assert [next(it), next(it)] == [0, 1]
    restored = iter(with_options(ds, **{RAISE: 0.0}))
    restored.set_state(it.get_state())
    assert list(restored) == []


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "num_threads"), CASES)
def test_a_filter_dropping_more_than_the_raise_threshold_raises(where, num_threads):
    ds = with_options(drops(5, where=where, num_threads=num_threads), **{RAISE: 0.5})
    with pytest.raises(ValueError, match=RAISE):
        list(ds)


@pytest.mark.parametrize("where", WHERE)
def test_a_filter_dropping_less_than_the_raise_threshold_does_not_raise(where):
    assert len(list(with_options(drops(5, where=where), **{RAISE: 0.9}))) == 400


@pytest.mark.parametrize("where", WHERE)
def test_raising_takes_precedence_over_warning(where):
    ds = with_options(drops(20, where=where), **{RAISE: 0.5, WARN: 0.5})
    with pytest.raises(ValueError, match=RAISE):
        list(ds)


def test_options_reach_filters_before_later_stages():
    ds = drops(5).map(lambda x: x + 1).batch(4)
    with pytest.raises(ValueError, match=RAISE):
        list(with_options(ds, **{RAISE: 0.5}))


def test_options_reach_the_filters_of_every_mixed_component():
    for component in (0, 1):
        parts = [MapDataset.range(5000).to_iter_dataset(), MapDataset.range(5000).to_iter_dataset()]
        parts[component] = drops(5, n=5000, where="iter" if component else "map")
        ds = with_options(IterDataset.mix(parts), **{RAISE: 0.5})
        with pytest.raises(ValueError, match=RAISE):
            list(ds)


def test_options_given_before_an_iter_filter_apply_to_it():
    ds = with_options(MapDataset.range(2000).to_iter_dataset(), **{RAISE: 0.5})
    with pytest.raises(ValueError, match=RAISE):
        list(ds.filter(lambda x: x % 5 == 0))


# -- merging -------------------------------------------------------------------------------------


def test_the_outer_options_win_raising():
    inner = with_options(drops(5), **{RAISE: 0.9})
    with pytest.raises(ValueError, match=RAISE):
        list(with_options(inner, **{RAISE: 0.5}))
    inner = with_options(drops(5), **{RAISE: 0.5})
    assert len(list(with_options(inner, **{RAISE: 0.9}))) == 400


def test_the_outer_options_win_warning():
    inner = with_options(drops(5), **{WARN: 0.95})
    with pytest.warns(UserWarning, match=WARN):
        list(with_options(inner, **{WARN: 0.5}))
    inner = with_options(drops(20), **{WARN: 0.5})
    assert len(list(with_options(inner, **{WARN: None}))) == 100


# The outer dataset sets the field explicitly: that its value equals the
# default does not make it "unset".


def test_the_outer_options_win_when_they_set_the_default_warn_ratio():
    inner = with_options(drops(20), **{WARN: None})
    with pytest.warns(UserWarning, match=WARN):
        list(with_options(inner, **{WARN: 0.9}))


def test_the_outer_options_win_when_they_set_the_default_raise_ratio():
    inner = with_options(drops(5), **{RAISE: 0.5})
    assert len(list(with_options(inner, **{RAISE: None}))) == 400


def test_fields_set_at_different_levels_combine():
    inner = with_options(drops(5), **{RAISE: 0.5})
    with pytest.raises(ValueError, match=RAISE):
        list(with_options(inner, **{WARN: None}))
    inner = with_options(drops(20), **{WARN: None})
    with pytest.raises(ValueError, match=RAISE):
        list(with_options(inner, **{RAISE: 0.5}))


def test_read_options_are_mutable_and_checked_like_grains():
    options = ReadOptions()
    options.num_threads = 2
    assert options == ReadOptions(num_threads=2)
    with pytest.raises(ValueError, match="num_threads"):
        options.num_threads = -1
    with pytest.raises(TypeError, match="prefetch_buffer_size"):
        options.prefetch_buffer_size = "many"
    assert options.num_threads == 2
    with pytest.raises(TypeError):
        hash(options)  # mutable, so unhashable, as in Grain
    ds = MapDataset.range(5).to_iter_dataset(options)
    assert list(ds) == [0, 1, 2, 3, 4]
