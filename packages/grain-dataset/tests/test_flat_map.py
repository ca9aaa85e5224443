"""FlatMapMapDataset and FlatMapIterDataset: one element in, up to max_fan_out out."""

import numpy as np
import pytest

import grain_dataset  # noqa: F401 - registers the transformations
from grain_dataset import (
    FlatMapTransform,
    MapDataset,
    MapTransform,
    ReadOptions,
    assert_equal_output_after_checkpoint,
)
from grain_dataset._map_stages._flat_map import FlatMapIterDataset, FlatMapMapDataset

pytestmark = pytest.mark.timeout(60)


def iter_source(n: int):
    return MapDataset.range(n).to_iter_dataset(ReadOptions(num_threads=0))


BUFFER = "next_index_in_buffer"


class Copies(FlatMapTransform):
    """`element % 4` copies of the element: 0 to 3 outputs."""

    max_fan_out = 3

    def __init__(self):
        self.calls = 0

    def flat_map(self, element):
        self.calls += 1
        return [element] * (element % 4)


class Words(FlatMapTransform):
    max_fan_out = 4

    def flat_map(self, element):
        return (word for word in element.split())  # a generator works too


def expected_copies(n):
    return [x for x in range(n) for _ in range(x % 4)]


# -- FlatMapMapDataset -------------------------------------------------------------------


def test_map_each_element_owns_max_fan_out_indices():
    ds = FlatMapMapDataset(MapDataset.range(4), Copies())
    assert len(ds) == 12
    assert [ds[i] for i in range(12)] == [
        None, None, None, 1, None, None, 2, 2, None, 3, 3, 3,
    ]  # fmt: skip
    assert list(ds) == [1, 2, 2, 3, 3, 3]


def test_map_later_epochs_map_to_the_parents_later_epochs():
    parent = MapDataset.range(8).shuffle(seed=2)
    ds = FlatMapMapDataset(parent, Copies())
    for index in (0, 23, 24, 50, 1000):
        element, slot = divmod(index, 3)
        value = parent[element]
        assert ds[index] == (value if slot < value % 4 else None)


def test_map_batched_path_equals_element_path_and_splits_each_element_once():
    transform = Copies()
    ds = FlatMapMapDataset(MapDataset.range(40), transform)
    indices = np.arange(30, 90)
    values = ds._getitems(indices)
    assert transform.calls == 20  # 60 consecutive indices cover 20 elements
    assert values == [ds[int(i)] for i in indices]
    scattered = np.random.default_rng(0).integers(0, 400, 100)
    assert ds._getitems(scattered) == [ds[int(i)] for i in scattered]
    assert ds._getitems(np.array([], dtype=np.int64)) == []


def test_map_filtered_parent_positions_stay_filtered():
    ds = FlatMapMapDataset(MapDataset.range(8).filter(lambda x: x < 4), Copies())
    assert ds[15] is None
    assert list(ds) == expected_copies(4)


def test_map_generator_outputs_and_pipeline():
    ds = FlatMapMapDataset(MapDataset.source(["a b", "c", "", "d e f g"]), Words())
    assert len(ds) == 16
    assert list(ds) == ["a", "b", "c", "d", "e", "f", "g"]
    # Batching after iteration packs the outputs; a MapDataset batch would batch positions.
    batches = ds.map(str.upper).to_iter_dataset().batch(3, batch_fn=list)
    assert list(batches) == [["A", "B", "C"], ["D", "E", "F"], ["G"]]


def test_map_infinite_parent():
    ds = FlatMapMapDataset(MapDataset.range(5).repeat(), Copies())
    assert ds[3 * 5 * 10 + 3] == 1  # element 51 of the repeat is 1


def test_map_checkpoint_conformance():
    ds = FlatMapMapDataset(MapDataset.range(20).shuffle(seed=1), Copies())
    assert_equal_output_after_checkpoint(ds.to_iter_dataset(ReadOptions(num_threads=0)))


# -- FlatMapIterDataset ------------------------------------------------------------------


def test_iter_yields_every_output_in_order():
    assert list(FlatMapIterDataset(iter_source(10), Copies())) == expected_copies(10)
    words = FlatMapIterDataset(MapDataset.source(["a b", "", "c"]).to_iter_dataset(), Words())
    assert list(words) == ["a", "b", "c"]
    # A MapDataset parent is read with to_iter_dataset().
    assert list(FlatMapIterDataset(MapDataset.range(6), Copies())) == expected_copies(6)


def test_iter_state_is_the_element_and_outputs_returned():
    it = iter(FlatMapIterDataset(iter_source(10), Copies()))
    assert it.get_state() == {"parent": {"next_index": 0}, BUFFER: 0}
    assert [next(it) for _ in range(4)] == [1, 2, 2, 3]
    # Inside element 3: one of its three outputs returned.
    state = it.get_state()
    assert state == {"parent": {"next_index": 3}, BUFFER: 1}
    rest = list(it)
    fresh = iter(FlatMapIterDataset(iter_source(10), Copies()))
    fresh.set_state(state)
    assert list(fresh) == rest == [3, 3, 5, 6, 6, 7, 7, 7, 9]
    # After an element's last output the state stays on it until the next element is
    # read, as in Grain: element 2's two outputs returned.
    it = iter(FlatMapIterDataset(iter_source(10), Copies()))
    for _ in range(3):
        next(it)
    state = it.get_state()
    assert state == {"parent": {"next_index": 2}, BUFFER: 2}
    fresh = iter(FlatMapIterDataset(iter_source(10), Copies()))
    fresh.set_state(state)
    assert next(fresh) == 3
    # At the end: the parent's state at its end, the last count kept (Grain's values).
    assert list(it)[-1] == 9
    assert it.get_state() == {"parent": {"next_index": 10}, BUFFER: 1}
    # A state of an earlier version ("emitted": always before the element's end).
    fresh = iter(FlatMapIterDataset(iter_source(10), Copies()))
    fresh.set_state({"parent": {"next_index": 3}, "emitted": 1})
    assert list(fresh) == [3, 3, 5, 6, 6, 7, 7, 7, 9]


@pytest.mark.parametrize("n", [0, 1, 4, 13])
def test_iter_checkpoint_conformance(n):
    assert_equal_output_after_checkpoint(FlatMapIterDataset(iter_source(n), Copies()))


def test_iter_checkpoint_conformance_in_a_pipeline():
    ds = FlatMapIterDataset(
        MapDataset.range(30).shuffle(seed=3).to_iter_dataset(ReadOptions(num_threads=2)),
        Copies(),
    ).batch(2, batch_fn=list)
    assert_equal_output_after_checkpoint(ds)


class FailsOn(FlatMapTransform):
    max_fan_out = 2

    def __init__(self, bad):
        self.bad = bad

    def flat_map(self, element):
        if element == self.bad:
            raise KeyError(f"cannot split {element}")
        return [element, -element]


def test_iter_transform_error_drops_the_element_and_names_the_stage():
    it = iter(FlatMapIterDataset(iter_source(4), FailsOn(1)))
    assert [next(it), next(it)] == [0, 0]
    with pytest.raises(KeyError, match="cannot split 1") as info:
        next(it)
    assert any("FlatMapIterDataset(FailsOn" in note for note in info.value.__notes__)
    assert it.get_state() == {"parent": {"next_index": 2}, BUFFER: 0}
    assert list(it) == [2, -2, 3, -3]


def test_map_transform_error_names_the_stage():
    ds = FlatMapMapDataset(MapDataset.range(4), FailsOn(2))
    with pytest.raises(KeyError, match="cannot split 2") as info:
        ds[4]
    assert any("FlatMapMapDataset(FailsOn" in note for note in info.value.__notes__)


class TooMany(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return range(element)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FlatMapMapDataset(MapDataset.range(5), TooMany())[3 * 2],
        lambda: list(FlatMapIterDataset(iter_source(5), TooMany())),
        lambda: FlatMapMapDataset(MapDataset.range(5), TooMany())._getitems(np.arange(10)),
    ],
)
def test_more_outputs_than_max_fan_out_raise(make):
    with pytest.raises(ValueError, match=r"TooMany returned more than max_fan_out=2 .* element 3"):
        make()


class Endless(FlatMapTransform):
    max_fan_out = 5

    def flat_map(self, element):
        while True:
            yield element


def test_an_endless_generator_is_cut_and_rejected():
    with pytest.raises(ValueError, match="max_fan_out=5"):
        next(iter(FlatMapIterDataset(iter_source(1), Endless())))


class NoFanOut(FlatMapTransform):
    def flat_map(self, element):
        return [element]


class ZeroFanOut(NoFanOut):
    max_fan_out = 0


class FloatFanOut(NoFanOut):
    max_fan_out = 2.0


class Double(MapTransform):
    def map(self, element):
        return 2 * element


@pytest.mark.parametrize(
    ("transform", "error", "match"),
    [
        (NoFanOut(), TypeError, "`transform.max_fan_out` must be an integer"),
        (ZeroFanOut(), ValueError, "`transform.max_fan_out` must be >= 1, got 0"),
        (FloatFanOut(), TypeError, "`transform.max_fan_out` must be an integer"),
        (lambda x: [x], TypeError, "must be a FlatMapTransform"),
        (Double(), TypeError, "must be a FlatMapTransform"),
    ],
)
def test_bad_transforms(transform, error, match):
    with pytest.raises(error, match=match):
        FlatMapMapDataset(MapDataset.range(3), transform)
    with pytest.raises(error, match=match):
        FlatMapIterDataset(iter_source(3), transform)


def test_bad_parents_and_states():
    with pytest.raises(TypeError, match="use FlatMapIterDataset"):
        FlatMapMapDataset(iter_source(3), Copies())
    with pytest.raises(TypeError, match="`parent` must be an IterDataset"):
        FlatMapIterDataset([1, 2], Copies())
    it = iter(FlatMapIterDataset(iter_source(10), Copies()))
    with pytest.raises(ValueError, match=r"must be <= max_fan_out \(3\), got 4"):
        it.set_state({"parent": {"next_index": 0}, BUFFER: 4})
    with pytest.raises(ValueError, match="expected the keys"):
        it.set_state({"next_index": 0})
    # Element 1 has one output: two cannot have been returned.
    it.set_state({"parent": {"next_index": 1}, BUFFER: 2})
    with pytest.raises(ValueError, match="says 2 outputs of the current element"):
        next(it)


def test_reprs():
    assert "max_fan_out=3" in repr(FlatMapMapDataset(MapDataset.range(2), Copies()))
    assert repr(FlatMapIterDataset(iter_source(2), Copies())) == (
        "FlatMapIterDataset(Copies, max_fan_out=3)"
    )
