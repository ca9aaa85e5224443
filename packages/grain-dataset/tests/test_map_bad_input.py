"""MapDataset's errors: bad arguments name themselves, user errors keep their type.

A bad argument raises ValueError (a value out of range) or TypeError (a value
of the wrong kind) when the pipeline is built, with the argument's name in the
message. An exception raised by a user function reaches the caller unchanged
in type, with a note (PEP 678) naming the stage it came from.
"""

import pytest

from grain_dataset import (
    DatasetSelectionMap,
    FilterTransform,
    MapDataset,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    ReadOptions,
)


class Keep(FilterTransform):
    def filter(self, element):
        return True


class Same(MapTransform):
    def map(self, element):
        return element


class Noise(RandomMapTransform):
    def random_map(self, element, rng):
        return element


class Indexed(MapWithIndex):
    def map_with_index(self, index, element):
        return element


class OutOfRange(DatasetSelectionMap):
    def __len__(self):
        return 3

    def __getitem__(self, index):
        return 5, index


class NotAPair(DatasetSelectionMap):
    def __len__(self):
        return 3

    def __getitem__(self, index):
        return 0


def ds():
    return MapDataset.range(10)


BAD_ARGUMENTS = {
    # batch
    "batch_size 0": (lambda: ds().batch(0), ValueError, "batch_size"),
    "batch_size negative": (lambda: ds().batch(-3), ValueError, "batch_size"),
    "batch_size float": (lambda: ds().batch(2.0), TypeError, "batch_size"),
    "batch_size str": (lambda: ds().batch("2"), TypeError, "batch_size"),
    "batch_size None": (lambda: ds().batch(None), TypeError, "batch_size"),
    "batch_fn not callable": (lambda: ds().batch(2, batch_fn=3), TypeError, "batch_fn"),
    "drop_remainder not bool": (
        lambda: ds().batch(2, drop_remainder="yes"),
        TypeError,
        "drop_remainder",
    ),
    # slice
    "slice step 0": (lambda: ds()[::0], ValueError, "step"),
    "slice method step 0": (lambda: ds().slice(slice(1, 5, 0)), ValueError, "step"),
    "slice float bound": (lambda: ds()[1.5:], TypeError, "start"),
    "slice float step": (lambda: ds()[::1.5], TypeError, "step"),
    "slice method without a slice": (lambda: ds().slice(3), TypeError, "sl"),
    # repeat
    "repeat infinite": (lambda: ds().repeat().repeat(), ValueError, "infinite"),
    "repeat infinite n times": (lambda: ds().repeat().repeat(2), ValueError, "infinite"),
    "repeat 0": (lambda: ds().repeat(0), ValueError, "num_epochs"),
    "repeat negative": (lambda: ds().repeat(-2), ValueError, "num_epochs"),
    "repeat float": (lambda: ds().repeat(2.0), TypeError, "num_epochs"),
    # mix
    "mix weights too short": (lambda: MapDataset.mix([ds(), ds()], [1.0]), ValueError, "weights"),
    "mix weights too long": (
        lambda: MapDataset.mix([ds(), ds()], [1, 1, 1]),
        ValueError,
        "weights",
    ),
    "mix weight negative": (lambda: MapDataset.mix([ds(), ds()], [1, -1]), ValueError, "weights"),
    "mix weights all zero": (lambda: MapDataset.mix([ds(), ds()], [0, 0]), ValueError, "weights"),
    "mix weight nan": (
        lambda: MapDataset.mix([ds(), ds()], [1, float("nan")]),
        ValueError,
        "weights",
    ),
    "mix weight infinite": (
        lambda: MapDataset.mix([ds(), ds()], [1, float("inf")]),
        ValueError,
        "weights",
    ),
    "mix weight not a number": (
        lambda: MapDataset.mix([ds(), ds()], [1, "2"]),
        TypeError,
        "weights",
    ),
    "mix empty": (lambda: MapDataset.mix([]), ValueError, "datasets"),
    "mix of a non-dataset": (lambda: MapDataset.mix([ds(), [1, 2]]), TypeError, "datasets"),
    "mix of one dataset not in a list": (lambda: MapDataset.mix(ds()), TypeError, "datasets"),
    # concatenate
    "concatenate of a non-dataset": (
        lambda: MapDataset.concatenate([ds(), range(3)]),
        TypeError,
        "datasets",
    ),
    "concatenate infinite before the last": (
        lambda: MapDataset.concatenate([ds().repeat(), ds()]),
        ValueError,
        "infinite",
    ),
    # transforms
    "map not callable": (lambda: ds().map(3), TypeError, "transform"),
    "map_with_index not callable": (lambda: ds().map_with_index("f"), TypeError, "transform"),
    "random_map not callable": (lambda: ds().random_map(None, seed=1), TypeError, "transform"),
    "filter not callable": (lambda: ds().filter([]), TypeError, "transform"),
    "FilterTransform to map": (lambda: ds().map(Keep()), TypeError, r"\.filter"),
    "MapTransform to filter": (lambda: ds().filter(Same()), TypeError, r"\.map"),
    "RandomMapTransform to map": (lambda: ds().map(Noise()), TypeError, r"\.random_map"),
    "MapWithIndex to map": (lambda: ds().map(Indexed()), TypeError, r"\.map_with_index"),
    "MapTransform to random_map": (
        lambda: ds().random_map(Same(), seed=1),
        TypeError,
        r"\.map",
    ),
    # factories
    "source of object()": (lambda: MapDataset.source(object()), TypeError, "source"),
    "source of an int": (lambda: MapDataset.source(5), TypeError, "source"),
    "source of a generator": (
        lambda: MapDataset.source(x for x in range(3)),
        TypeError,
        "source",
    ),
    "range step 0": (lambda: MapDataset.range(0, 10, 0), ValueError, "step"),
    "range float start": (lambda: MapDataset.range(1.5), TypeError, "start"),
    "range float stop": (lambda: MapDataset.range(0, 5.0), TypeError, "stop"),
    "range str step": (lambda: MapDataset.range(0, 5, "1"), TypeError, "step"),
    "select_from_datasets without a map": (
        lambda: MapDataset.select_from_datasets([ds()], 3),
        TypeError,
        "selection_map",
    ),
    "select_from_datasets empty": (
        lambda: MapDataset.select_from_datasets([], OutOfRange()),
        ValueError,
        "datasets",
    ),
    # to_iter_dataset
    "read_options of the wrong type": (
        lambda: ds().to_iter_dataset(read_options={"num_threads": 2}),
        TypeError,
        "read_options",
    ),
    "ReadOptions negative threads": (
        lambda: ReadOptions(num_threads=-1),
        ValueError,
        "num_threads",
    ),
}


@pytest.mark.parametrize(
    ("build", "error", "words"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys()
)
def test_bad_argument_raises_naming_the_argument(build, error, words):
    with pytest.raises(error, match=words):
        build()


def test_repeat_and_concatenate_of_nothing_are_empty_as_in_grain():
    assert len(MapDataset.range(0).repeat()) == 0
    assert list(MapDataset.range(0).repeat(3, reseed_each_epoch=False)) == []
    empty = MapDataset.concatenate([])
    assert len(empty) == 0
    assert list(empty) == []
    with pytest.raises(IndexError):
        empty[0]


def test_selection_map_pointing_past_the_datasets_raises_on_access():
    ds = MapDataset.select_from_datasets([MapDataset.range(3)], OutOfRange())
    with pytest.raises(ValueError, match="dataset index"):
        ds[0]


def test_selection_map_returning_a_non_pair_raises_on_access():
    ds = MapDataset.select_from_datasets([MapDataset.range(3)], NotAPair())
    with pytest.raises(TypeError, match="pair"):
        ds[1]


# -- errors raised by user functions ------------------------------------------------------


class UserError(Exception):
    pass


def fails_on_3(x):
    if x == 3:
        raise UserError(f"bad element {x}")
    return x


STAGES = {
    "map": (lambda ds: ds.map(fails_on_3), "MapMapDataset"),
    "map_with_index": (
        lambda ds: ds.map_with_index(lambda i, x: fails_on_3(x)),
        "MapWithIndexMapDataset",
    ),
    "random_map": (
        lambda ds: ds.random_map(lambda x, rng: fails_on_3(x), seed=0),
        "RandomMapMapDataset",
    ),
    "filter": (lambda ds: ds.filter(lambda x: fails_on_3(x) >= 0), "FilterMapDataset"),
    "batch_fn": (
        lambda ds: ds.batch(1, batch_fn=lambda xs: fails_on_3(xs[0])),
        "BatchMapDataset",
    ),
    "MapTransform": (lambda ds: ds.map(Failing()), "MapMapDataset"),
}


class Failing(MapTransform):
    def map(self, element):
        return fails_on_3(element)


def _check(error_info, stage_name):
    assert error_info.type is UserError
    assert "bad element 3" in str(error_info.value)
    notes = getattr(error_info.value, "__notes__", [])
    assert any(stage_name in note for note in notes), notes


@pytest.mark.parametrize(("stage", "name"), STAGES.values(), ids=STAGES.keys())
def test_user_error_keeps_its_type_and_names_the_stage_on_single_reads(stage, name):
    ds = stage(MapDataset.range(6))
    assert ds[2] is not None
    with pytest.raises(UserError) as error:
        ds[3]
    _check(error, name)


@pytest.mark.parametrize(("stage", "name"), STAGES.values(), ids=STAGES.keys())
def test_user_error_keeps_its_type_and_names_the_stage_when_iterating(stage, name):
    for options in (ReadOptions(num_threads=0), ReadOptions(num_threads=4)):
        iterator = iter(stage(MapDataset.range(6)).to_iter_dataset(options))
        assert [next(iterator) is not None for _ in range(3)] == [True] * 3
        with pytest.raises(UserError) as error:
            next(iterator)
        _check(error, name)


@pytest.mark.parametrize(("stage", "name"), STAGES.values(), ids=STAGES.keys())
def test_user_error_keeps_its_type_and_names_the_stage_in_a_batched_read(stage, name):
    # Without threads, to_iter_dataset reads whole chunks through the vectorized path.
    ds = stage(MapDataset.range(6)).to_iter_dataset(ReadOptions(num_threads=0))
    with pytest.raises(UserError) as error:
        list(ds)
    _check(error, name)


def test_user_error_after_a_shuffle_names_the_failing_stage_once():
    ds = MapDataset.range(6).seed(1).shuffle().map(fails_on_3).map(str)
    with pytest.raises(UserError) as error:
        list(ds)
    notes = error.value.__notes__
    assert len([note for note in notes if "MapMapDataset" in note]) == 1, notes


def test_error_inside_a_source_propagates_unchanged():
    class Broken:
        def __len__(self):
            return 4

        def __getitem__(self, index):
            raise KeyError(index)

    ds = MapDataset.source(Broken()).map(str)
    with pytest.raises(KeyError):
        ds[1]
    with pytest.raises(KeyError):
        list(ds)
