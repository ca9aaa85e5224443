"""ShapeDtypeStruct and get_element_spec: the shape and dtype of every leaf, from one element.

The spec keeps the element's structure and container types and maps each
leaf by numpy's reading of it. Reading is limited to one element (a
MapDataset's first kept element, an IterDataset's first, whose iterator is
then closed); empty datasets and leaves that are not arrays or scalars raise.
"""

import collections
import dataclasses

import numpy as np
import pytest

from grain_dataset import DatasetIterator, IterDataset, MapDataset, ReadOptions
from grain_dataset._core._element_spec import (
    ShapeDtypeStruct,
    get_element_spec,
    map_with_path,
    spec_of,
)

Point = collections.namedtuple("Point", ["x", "y"])


# -- ShapeDtypeStruct -------------------------------------------------------------------------


def test_shape_and_dtype_are_normalized():
    spec = ShapeDtypeStruct([2, np.int64(3)], "float32")
    assert spec == ShapeDtypeStruct((2, 3), np.float32)
    assert spec.shape == (2, 3)
    assert type(spec.shape[1]) is int
    assert spec.dtype == np.dtype(np.float32)
    assert isinstance(spec.dtype, np.dtype)
    assert spec.ndim == 2
    assert repr(spec) == "ShapeDtypeStruct(shape=(2, 3), dtype=float32)"


def test_is_frozen_and_hashable():
    spec = ShapeDtypeStruct((), np.int64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.shape = (1,)
    assert {spec: 1}[ShapeDtypeStruct((), "int64")] == 1
    assert spec != ShapeDtypeStruct((), np.int32)
    assert spec != ShapeDtypeStruct((1,), np.int64)


def test_docstring_example_builds_a_matching_array():
    spec = ShapeDtypeStruct((28, 28), np.uint8)
    array = np.zeros(spec.shape, spec.dtype)
    assert spec_of(array) == spec


@pytest.mark.parametrize(
    ("shape", "dtype", "error", "match"),
    [
        (3, "float32", TypeError, "shape"),
        (("a",), "float32", TypeError, "shape"),
        ((2.5,), "float32", TypeError, "shape"),
        ((-1,), "float32", ValueError, "negative"),
        ((2,), "not-a-dtype", TypeError, "dtype"),
    ],
)
def test_bad_shape_or_dtype(shape, dtype, error, match):
    with pytest.raises(error, match=match):
        ShapeDtypeStruct(shape, dtype)


# -- leaves -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("leaf", "expected"),
    [
        (np.zeros((2, 3), np.float32), ShapeDtypeStruct((2, 3), np.float32)),
        (np.array(5, np.uint16), ShapeDtypeStruct((), np.uint16)),
        (np.float16(1.5), ShapeDtypeStruct((), np.float16)),
        (np.bool_(True), ShapeDtypeStruct((), np.bool_)),
        (True, ShapeDtypeStruct((), np.bool_)),
        (7, ShapeDtypeStruct((), np.int64)),
        (7.5, ShapeDtypeStruct((), np.float64)),
        (1j, ShapeDtypeStruct((), np.complex128)),
        ("text", ShapeDtypeStruct((), object)),
        (b"\x00bytes", ShapeDtypeStruct((), object)),
        (np.array(["ab", "c"]), ShapeDtypeStruct((2,), "<U2")),
    ],
)
def test_leaf_specs(leaf, expected):
    assert spec_of(leaf) == expected


class DuckArray:
    """Like a jax.Array: has shape and dtype, is not a numpy array."""

    shape = (4, 2)
    dtype = np.dtype("bfloat16") if hasattr(np, "bfloat16") else np.dtype(np.float16)


def test_objects_with_shape_and_dtype_are_described_by_them():
    assert spec_of(DuckArray()) == ShapeDtypeStruct((4, 2), DuckArray.dtype)


def test_structure_and_container_types_are_kept():
    element = collections.OrderedDict(
        image=np.zeros((2, 2), np.uint8), meta=[1, (2.0, None)], point=Point(np.int8(1), "a")
    )
    spec = spec_of(element)
    assert type(spec) is collections.OrderedDict
    assert list(spec) == ["image", "meta", "point"]
    assert spec["image"] == ShapeDtypeStruct((2, 2), np.uint8)
    assert type(spec["meta"]) is list
    assert spec["meta"][0] == ShapeDtypeStruct((), np.int64)
    assert type(spec["meta"][1]) is tuple
    assert spec["meta"][1][1] is None
    assert type(spec["point"]) is Point
    assert spec["point"].x == ShapeDtypeStruct((), np.int8)
    assert spec["point"].y == ShapeDtypeStruct((), object)


def test_unsupported_leaf_names_its_path():
    with pytest.raises(TypeError, match=r"element\['a'\]\[1\]: its type object is not an array"):
        spec_of({"a": [1, object()]})


def test_map_with_path_passes_paths():
    seen = []
    result = map_with_path(lambda path, x: seen.append(path) or x * 2, {"a": [1, 2], "b": 3})
    assert result == {"a": [2, 4], "b": 6}
    assert seen == [("a", 0), ("a", 1), ("b",)]


# -- get_element_spec -------------------------------------------------------------------------


def make(i):
    return {"x": np.full(3, i, np.float32), "i": i}


def test_docstring_example():
    ds = MapDataset.range(10).map(lambda i: {"x": np.zeros(3), "i": i})
    assert get_element_spec(ds.batch(4)) == {
        "x": ShapeDtypeStruct((4, 3), np.float64),
        "i": ShapeDtypeStruct((4,), np.int64),
    }


def test_map_dataset_reads_only_element_zero():
    calls = []
    ds = MapDataset.range(100).map(lambda i: calls.append(i) or make(i))
    assert get_element_spec(ds) == {
        "x": ShapeDtypeStruct((3,), np.float32),
        "i": ShapeDtypeStruct((), np.int64),
    }
    assert calls == [0]


def test_map_dataset_with_element_zero_filtered_finds_the_first_kept():
    ds = MapDataset.range(10).filter(lambda i: i >= 3).map(lambda i: np.zeros(i))
    assert get_element_spec(ds) == ShapeDtypeStruct((3,), np.float64)


class Recording(IterDataset):
    def __init__(self, n):
        super().__init__()
        self.n = n
        self.produced = 0
        self.closed = 0

    def __iter__(self):
        return RecordingIterator(self)


class RecordingIterator(DatasetIterator):
    def __init__(self, dataset):
        super().__init__()
        self._dataset = dataset
        self._next = 0

    def __next__(self):
        if self._next >= self._dataset.n:
            raise StopIteration
        self._next += 1
        self._dataset.produced += 1
        return make(self._next - 1)

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        self._next = state["next"]

    def close(self):
        self._dataset.closed += 1


def test_iter_dataset_takes_one_element_and_closes_the_iterator():
    ds = Recording(50)
    assert get_element_spec(ds)["x"] == ShapeDtypeStruct((3,), np.float32)
    assert ds.produced == 1
    assert ds.closed == 1


def test_iter_dataset_pipeline():
    ds = MapDataset.range(10).to_iter_dataset(ReadOptions(num_threads=2)).map(make).batch(2)
    assert get_element_spec(ds) == {
        "x": ShapeDtypeStruct((2, 3), np.float32),
        "i": ShapeDtypeStruct((2,), np.int64),
    }


def test_empty_map_dataset():
    with pytest.raises(ValueError, match=r"RangeMapDataset.*is empty"):
        get_element_spec(MapDataset.range(0))


def test_map_dataset_that_filters_everything():
    # The filter-ratio check also says that every element was dropped.
    with (
        pytest.warns(UserWarning, match="dropped 5 of 5"),
        pytest.raises(ValueError, match="produced no element"),
    ):
        get_element_spec(MapDataset.range(5).filter(lambda i: False))


def test_empty_iter_dataset_is_named_and_closed():
    ds = Recording(0)
    with pytest.raises(ValueError, match=r"Recording.*produced no element"):
        get_element_spec(ds)
    assert ds.closed == 1


def test_not_a_dataset():
    with pytest.raises(TypeError, match="MapDataset or an IterDataset, got list"):
        get_element_spec([1, 2])
