"""`stack`'s level-at-a-time path gives what the element-by-element walk gives.

`grain_dataset._common._tree._VECTORIZED` switches between the two; every case here
stacks the same elements both ways and requires the same result (structure and
container types, dict key order, values, dtypes and shapes) or the same error
(type and message).
"""

import collections
import copy
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain_dataset._common._tree as tree
from grain_dataset import MapDataset, ReadOptions, stack


class Point(NamedTuple):
    x: object
    y: object


class Tagged(dict):
    """A dict subclass: rebuilt as its own type."""


class Opaque:
    """A leaf numpy knows nothing about: stacked into an object array."""

    def __init__(self, value: int):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


class Reversed(list):
    """A list that reads its items back to front: `value[i]` and iteration disagree."""

    def __getitem__(self, index):
        return list.__getitem__(self, len(self) - 1 - index)


def _outcome(elements: list[Any], vectorized: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(tree, "_VECTORIZED", vectorized)
    try:
        return ("value", stack(copy.deepcopy(elements)))
    except Exception as error:
        return ("error", type(error), str(error))


def assert_identical(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        assert actual.dtype.str == expected.dtype.str
        assert actual.shape == expected.shape
        assert actual.strides == expected.strides  # the memory layout too
        if expected.dtype == object:
            assert [type(a) for a in actual.ravel()] == [type(e) for e in expected.ravel()]
            assert actual.tolist() == expected.tolist()
        else:
            np.testing.assert_array_equal(actual, expected)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_identical(actual[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_identical(a, e)
    else:
        assert actual == expected


def check_same(elements: list[Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    walked = _outcome(elements, False, monkeypatch)
    fast = _outcome(elements, True, monkeypatch)
    assert fast[0] == walked[0], (fast, walked)
    if walked[0] == "error":
        assert fast[1:] == walked[1:]
    else:
        assert_identical(fast[1], walked[1])
    return walked


def _images(count: int, dtype: Any = np.uint8, shape: tuple[int, ...] = (4, 3)) -> list[Any]:
    rng = np.random.default_rng(count)
    return [rng.integers(0, 100, shape).astype(dtype) for _ in range(count)]


VALID = {
    "dict_image_label": [{"image": a, "label": k} for k, a in enumerate(_images(5))],
    "dict_keys_in_other_orders": [{"a": 1, "b": 2.0}, {"b": 3.0, "a": 4}],
    "dict_one_key": [{"x": a} for a in _images(3)],
    "dict_many_keys": [{f"k{i}": i * k for i in range(7)} for k in range(3)],
    "dict_many_keys_other_orders": [
        {f"k{i}": i * k for i in (range(7) if k % 2 else reversed(range(7)))} for k in range(3)
    ],
    "dict_empty": [{}, {}],
    "dict_subclass": [Tagged(x=1, y=np.ones(2)), Tagged(y=np.zeros(2), x=2)],
    "ordered_dict": [collections.OrderedDict(a=k, b=str(k)) for k in range(3)],
    "defaultdict": [collections.defaultdict(int, a=k) for k in range(3)],
    "tuple": [(a, k, float(k)) for k, a in enumerate(_images(4))],
    "list": [[a, np.int8(k)] for k, a in enumerate(_images(4))],
    "namedtuple": [Point(a, k) for k, a in enumerate(_images(3))],
    "empty_tuple": [(), ()],
    "nested": [
        {"a": {"image": a, "x": [1.0, k]}, "b": (k, {"c": b"z" * k})}
        for k, a in enumerate(_images(4))
    ],
    "none_leaves": [{"a": None, "b": k} for k in range(3)],
    "value_then_none": [{"a": 1}, {"a": None}],
    "python_scalars": [1, 2, 3],
    "ints_and_floats": [1, 2.5, True],
    "numpy_scalars": [np.float32(1), np.float32(2.5)],
    "numpy_and_python_scalars": [np.float32(1), 2.5],
    "zero_d_arrays": [np.array(k) for k in range(4)],
    "strings": ["a", "bcd", ""],
    "bytes_with_nul": [b"a\x00", b"\x00\x00", b""],
    "objects": [{"o": Opaque(k)} for k in range(2)],
    "arrays_mixed_dtypes": [np.zeros(3, np.int8), np.ones(3, np.int16)],
    "arrays_int_and_float": [np.zeros(3, np.int64), np.ones(3, np.float32)],
    "arrays_of_strings_widths": [np.array(["ab", "c"]), np.array(["abc", "d"])],
    "arrays_big_endian": [np.arange(3, dtype=">i4"), np.arange(3, dtype=">i4")],
    "arrays_structured": [np.zeros(2, dtype=[("x", "i4")]) for _ in range(3)],
    "arrays_object": [np.array([1, "a"], dtype=object) for _ in range(2)],
    "arrays_datetime": [np.zeros(2, dtype="M8[s]") for _ in range(2)],
    "arrays_bool_complex": [{"b": np.ones(2, bool), "c": np.ones(2, complex)} for _ in range(3)],
    "arrays_views": [np.arange(12).reshape(3, 4)[:, ::2] for _ in range(3)],
    "arrays_fortran": [np.asfortranarray(np.arange(6).reshape(2, 3)) for _ in range(3)],
    "arrays_transposed": [np.arange(12).reshape(3, 4).T for _ in range(3)],
    "arrays_mixed_layouts": [np.ones((2, 3)), np.asfortranarray(np.ones((2, 3)))],
    "arrays_size_one_dims": [np.ones((1, 3, 1), np.float32) for _ in range(3)],
    "arrays_empty": [np.ones((0, 3), np.int16) for _ in range(3)],
    "arrays_broadcast": [np.broadcast_to(np.arange(3), (2, 3)) for _ in range(2)],
    "array_subclass": [np.ma.masked_array(np.arange(3)) for _ in range(2)],
    "list_overriding_getitem": [Reversed([1, 2]), Reversed([3, 4])],
    "one_element": [{"image": np.ones((2, 2), np.float32), "label": 1}],
}

INVALID = {
    "dict_missing_key": [{"a": 1, "b": 2}, {"a": 1}],
    "dict_other_key": [{"a": 1, "b": 2}, {"a": 1, "c": 2}],
    "dict_extra_key": [{"a": 1}, {"a": 1, "b": 2}],
    "dict_many_keys_one_missing": [{f"k{i}": i for i in range(7)}, {f"k{i}": i for i in range(6)}],
    "dict_many_keys_one_other": [
        {f"k{i}": i for i in range(7)},
        {f"k{i}": i for i in [*range(6), 9]},
    ],
    "dict_then_list": [{"a": 1}, [1]],
    "tuple_lengths": [(1, 2), (1, 2, 3)],
    "tuple_then_list": [(1, 2), [1, 2]],
    "namedtuple_then_tuple": [Point(1, 2), (1, 2)],
    "container_then_leaf": [{"a": (1, 2)}, {"a": 3}],
    "leaf_then_container": [{"a": 3}, {"a": [1]}],
    "array_shapes": [{"x": np.zeros((2, 3))}, {"x": np.zeros((3, 2))}],
    "array_ranks": [np.zeros(2), np.zeros((1, 2))],
    "scalar_then_array": [1, np.zeros(2)],
    "none_then_value": [{"a": None}, {"a": 1}],
    "deep_mismatch": [{"a": [{"b": np.zeros(2)}]}, {"a": [{"b": np.zeros(3)}]}],
}


@pytest.mark.parametrize("name", list(VALID))
def test_same_batch_as_the_walk(name, monkeypatch):
    outcome = check_same(VALID[name], monkeypatch)
    assert outcome[0] == "value", outcome


@pytest.mark.parametrize("name", list(INVALID))
def test_same_error_as_the_walk(name, monkeypatch):
    outcome = check_same(INVALID[name], monkeypatch)
    assert outcome[0] == "error", outcome
    assert outcome[1] is ValueError
    assert "Expected all input elements to have the same structure" in outcome[2]


def test_the_fast_path_is_what_runs_by_default():
    assert tree._VECTORIZED is True


# -- random trees -------------------------------------------------------------------------

_LEAVES = st.sampled_from(["int", "float", "str", "bytes", "none", "u8", "f4", "i8_2x2"])
_TREES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
    ),
    max_leaves=6,
)


def _leaf(kind: str, rng: np.random.Generator) -> Any:
    value = int(rng.integers(0, 5))
    return {
        "int": value,
        "float": value / 2,
        "str": "s" * value,
        "bytes": b"\x00" * value,
        "none": None,
        "u8": np.full(3, value, np.uint8),
        "f4": np.float32(value),
        "i8_2x2": np.full((2, 2), value, np.int64),
    }[kind]


def _element(template: Any, rng: np.random.Generator) -> Any:
    if isinstance(template, dict):
        return {key: _element(child, rng) for key, child in template.items()}
    if isinstance(template, list | tuple):
        return type(template)(_element(child, rng) for child in template)
    return _leaf(template, rng)


@settings(max_examples=150, deadline=None)
@given(
    template=_TREES,
    other=_TREES,
    count=st.integers(1, 5),
    odd=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_random_trees_stack_as_the_walk_does(template, other, count, odd, seed):
    # Equal structures with random leaves, and sometimes one element of another structure.
    rng = np.random.default_rng(seed)
    elements = [_element(template, rng) for _ in range(count)]
    if odd < count:
        elements[odd] = _element(other, rng)
    with pytest.MonkeyPatch.context() as monkeypatch:
        check_same(elements, monkeypatch)


# -- through a pipeline ---------------------------------------------------------------------


class UserSource:
    """A user's source of dicts with an undeclared `__getitems__`, counting its calls."""

    def __init__(self, size: int):
        rng = np.random.default_rng(0)
        self._images = rng.integers(0, 256, (size, 5, 5), dtype=np.uint8)
        self._labels = rng.integers(0, 10, size)
        self.calls: collections.Counter[str] = collections.Counter()

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.calls["__getitem__"] += 1
        return {"image": self._images[index], "label": int(self._labels[index])}

    def __getitems__(self, indices: Any) -> list[dict[str, Any]]:
        self.calls["__getitems__"] += 1
        return [self[i] for i in indices]


def _epoch(vectorized: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], UserSource]:
    monkeypatch.setattr(tree, "_VECTORIZED", vectorized)
    source = UserSource(300)
    ds = MapDataset.source(source).seed(3).shuffle().batch(32)
    return list(ds.to_iter_dataset(ReadOptions(num_threads=0))), source


def test_pipeline_batches_equal_the_walk_and_read_records_one_by_one(monkeypatch):
    fast, fast_source = _epoch(True, monkeypatch)
    walked, walked_source = _epoch(False, monkeypatch)
    assert len(fast) == 10  # 300 records in batches of 32, the last of 12
    assert_identical(fast, walked)
    assert fast[-1]["image"].shape == (12, 5, 5)
    labels = np.concatenate([batch["label"] for batch in fast])
    assert sorted(labels.tolist()) == sorted(fast_source._labels.tolist())
    # An undeclared `__getitems__` is never called, on either path.
    assert fast_source.calls == walked_source.calls == {"__getitem__": 300}


class WithInstanceGetitem:
    """`source[i]` calls the class's `__getitem__`, never the instance attribute."""

    def __init__(self) -> None:
        self.__getitem__ = lambda index: "the instance attribute"

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, str]:
        return (index, "the class")


class WithAttributeHook:
    """A `__getattribute__` that answers `__getitem__` differently from `source[i]`."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return index

    def __getattribute__(self, name: str) -> Any:
        if name == "__getitem__":
            return lambda index: -1
        return object.__getattribute__(self, name)


class Slotted:
    __slots__ = ("size",)

    def __init__(self) -> None:
        self.size = 4

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> list[int]:
        return [index, index * 2]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            WithInstanceGetitem(),
            [[(0, 1), ("the class", "the class")], [(2, 3), ("the class",) * 2]],
        ),
        (WithAttributeHook(), [[0, 1], [2, 3]]),
        (Slotted(), [[[0, 1], [0, 2]], [[2, 3], [4, 6]]]),
        ([10, 11, 12, 13], [[10, 11], [12, 13]]),
    ],
    ids=["instance_getitem", "getattribute_hook", "slots", "list"],
)
def test_records_are_read_as_source_index(source, expected):
    ds = MapDataset.source(source).batch(2)
    got = list(ds.to_iter_dataset(ReadOptions(num_threads=0)))
    assert len(got) == len(expected)
    for batch, want in zip(got, expected, strict=True):
        if isinstance(want[0], tuple):  # a tuple of two leaves per record
            assert type(batch) is tuple
            assert [b.tolist() for b in batch] == [list(w) for w in want]
        else:
            assert np.asarray(batch).tolist() == want
