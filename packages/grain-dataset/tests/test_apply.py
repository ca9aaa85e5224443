"""apply_transformations: transform objects become the matching dataset stages, in order.

Each result is compared with the same pipeline written with the dataset
methods, on MapDataset and IterDataset. Plain callables, unknown objects and
ambiguous ones raise TypeError listing what is accepted; a FlatMapTransform
uses grain_dataset._map_stages._flat_map's stages when that module exists and raises
NotImplementedError naming the alternative when it does not.
"""

import sys
import types

import numpy as np
import pytest

from grain_dataset import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    IterDataset,
    MapDataset,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    ReadOptions,
    assert_equal_output_after_checkpoint,
)
from grain_dataset._map_stages._apply import apply_transformations


class Double(MapTransform):
    def map(self, x):
        return 2 * x


class AddOne(MapTransform):
    def map(self, x):
        return x + 1


class NotMultipleOfThree(FilterTransform):
    def filter(self, x):
        return x % 3 != 0


class FirstNotMultipleOfFour(FilterTransform):
    def filter(self, batch):
        return int(batch[0]) % 4 != 0


class AddIndex(MapWithIndex):
    def map_with_index(self, index, x):
        return x + 1000 * index


class AddNoise(RandomMapTransform):
    def random_map(self, x, rng):
        return x + int(rng.integers(100))


class Split(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x):
        return [x, -x]


def as_lists(ds):
    return [b.tolist() if isinstance(b, np.ndarray) else b for b in ds]


def iter_source(n=12):
    return MapDataset.range(n).to_iter_dataset(ReadOptions(num_threads=0))


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_same_as_the_dataset_methods(kind):
    source = MapDataset.range(12) if kind == "map" else iter_source()
    source = source.seed(7)
    # A MapDataset cannot batch after a filter, so there the batch comes first.
    if kind == "map":
        transforms = [
            Double(),
            AddIndex(),
            Batch(batch_size=3),
            FirstNotMultipleOfFour(),
            AddNoise(),
        ]
        manual = (
            source.map(Double())
            .map_with_index(AddIndex())
            .batch(3)
            .filter(FirstNotMultipleOfFour())
            .random_map(AddNoise())
        )
    else:
        transforms = [Double(), NotMultipleOfThree(), AddIndex(), AddNoise(), Batch(batch_size=3)]
        manual = (
            source.map(Double())
            .filter(NotMultipleOfThree())
            .map_with_index(AddIndex())
            .random_map(AddNoise())
            .batch(3)
        )
    applied = apply_transformations(source, transforms)
    assert isinstance(applied, MapDataset if kind == "map" else IterDataset)
    assert as_lists(applied) == as_lists(manual)
    assert len(as_lists(applied)) > 1


def test_batch_after_filter_on_a_map_dataset_is_refused_as_the_method_is():
    transforms = [NotMultipleOfThree(), Batch(batch_size=3)]
    with pytest.raises(ValueError, match="cannot follow"):
        apply_transformations(MapDataset.range(12), transforms)
    with pytest.raises(ValueError, match="cannot follow"):
        MapDataset.range(12).apply(transforms)


def test_order_matters():
    source = MapDataset.range(6)
    assert list(apply_transformations(source, [AddOne(), NotMultipleOfThree()])) == [1, 2, 4, 5]
    assert list(apply_transformations(source, [NotMultipleOfThree(), AddOne()])) == [2, 3, 5, 6]
    assert list(apply_transformations(source, [AddIndex(), Double()])) == [
        2 * (x + 1000 * x) for x in range(6)
    ]
    assert list(apply_transformations(source, [Double(), AddIndex()])) == [
        2 * x + 1000 * x for x in range(6)
    ]


def test_docstring_example():
    ds = apply_transformations(MapDataset.range(5), [Double(), Batch(batch_size=2)])
    assert as_lists(ds) == [[0, 2], [4, 6], [8]]


def test_a_single_transform_and_a_tuple():
    assert list(apply_transformations(MapDataset.range(3), Double())) == [0, 2, 4]
    assert list(apply_transformations(iter_source(3), (Double(), Double()))) == [0, 4, 8]
    assert list(apply_transformations(MapDataset.range(3), [])) == [0, 1, 2]


def test_batch_options_are_passed_on():
    ds = apply_transformations(
        MapDataset.range(7), Batch(batch_size=3, drop_remainder=True, batch_fn=sum)
    )
    assert list(ds) == [3, 12]
    ds = apply_transformations(iter_source(7), Batch(batch_size=3, drop_remainder=False))
    assert as_lists(ds) == [[0, 1, 2], [3, 4, 5], [6]]


def test_random_map_needs_a_seed_as_usual():
    with pytest.raises(ValueError, match="seed"):
        apply_transformations(MapDataset.range(3), [AddNoise()])


def test_applied_iter_pipeline_checkpoints():
    ds = apply_transformations(iter_source().seed(1), [AddIndex(), AddNoise(), Batch(2)])
    assert_equal_output_after_checkpoint(ds)


# -- flat map ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_flat_map_without_the_module_names_the_alternative(kind, monkeypatch):
    monkeypatch.setitem(sys.modules, "grain_dataset._map_stages._flat_map", None)
    source = MapDataset.range(3) if kind == "map" else iter_source(3)
    name = "FlatMapMapDataset" if kind == "map" else "FlatMapIterDataset"
    with pytest.raises(NotImplementedError, match=f"Split.*{name}"):
        apply_transformations(source, [Double(), Split()])


def test_flat_map_uses_the_flat_map_stages_when_present(monkeypatch):
    built = []

    def stage(name):
        def build(parent, transform):
            built.append((name, parent, transform))
            return parent

        return build

    fake = types.ModuleType("grain_dataset._map_stages._flat_map")
    fake.FlatMapMapDataset = stage("map")
    fake.FlatMapIterDataset = stage("iter")
    monkeypatch.setitem(sys.modules, "grain_dataset._map_stages._flat_map", fake)
    split = Split()
    source = MapDataset.range(3)
    apply_transformations(source, [split])
    apply_transformations(iter_source(3), split)
    assert [(name, transform) for name, _, transform in built] == [("map", split), ("iter", split)]
    assert built[0][1] is source


def test_flat_map_with_the_real_module_if_it_exists():
    try:
        import grain_dataset._map_stages._flat_map  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(NotImplementedError, match="FlatMapIterDataset"):
            apply_transformations(iter_source(3), Split())
    else:
        assert list(apply_transformations(iter_source(3), Split())) == [0, 0, 1, -1, 2, -2]
        assert list(apply_transformations(MapDataset.range(3), Split())) == [0, 0, 1, -1, 2, -2]


# -- errors -----------------------------------------------------------------------------------


class Both(MapTransform, FilterTransform):
    def map(self, x):
        return x

    def filter(self, x):
        return True


def test_plain_callable_is_refused_with_the_accepted_list():
    with pytest.raises(TypeError, match=r"transformations\[1\] is a plain callable") as info:
        apply_transformations(MapDataset.range(3), [Double(), lambda x: x])
    for name in ("Map", "RandomMap", "Filter", "MapWithIndex", "Batch", "FlatMapTransform"):
        assert name in str(info.value)


def test_unknown_object_names_its_type():
    with pytest.raises(TypeError, match="`transformations` is int"):
        apply_transformations(MapDataset.range(3), 5)
    with pytest.raises(TypeError, match=r"transformations\[0\] is str"):
        apply_transformations(MapDataset.range(3), ["map"])


def test_ambiguous_transform_is_refused():
    with pytest.raises(TypeError, match=r"several transform protocols.*MapTransform.*Filter"):
        apply_transformations(MapDataset.range(3), Both())


def test_not_a_dataset():
    with pytest.raises(TypeError, match="MapDataset or an IterDataset, got list"):
        apply_transformations([1, 2], [Double()])
