"""PyTree batching: `stack` and the default `batch_fn` of MapDataset.batch.

A PyTree is nested dicts, lists, tuples and namedtuples; everything else is a
leaf. Stacking keeps the structure (and the container types) and stacks each
leaf along a new first axis; elements that disagree in structure or leaf shape
raise ValueError naming the leaf's path and the element.
"""

import collections
import re
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset, stack


class Point(NamedTuple):
    x: object
    y: object


Pair = collections.namedtuple("Pair", ["first", "second"])


def assert_same(actual, expected):
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{actual!r} is not an array"
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        np.testing.assert_array_equal(actual, expected)
    elif isinstance(expected, dict):
        assert type(actual) is type(expected)
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert type(actual) is type(expected), (type(actual), type(expected))
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    else:
        assert actual == expected


# -- structure and leaves -----------------------------------------------------------------


def test_stack_spec_docstring_example():
    result = stack([{"x": np.zeros(3), "y": 1}, {"x": np.ones(3), "y": 2}])
    assert_same(result, {"x": np.stack([np.zeros(3), np.ones(3)]), "y": np.array([1, 2])})


def test_arrays_stack_along_a_new_first_axis():
    elements = [np.arange(6, dtype=np.int32).reshape(2, 3) + 10 * k for k in range(4)]
    result = stack(elements)
    assert result.shape == (4, 2, 3)
    assert result.dtype == np.int32
    for k in range(4):
        np.testing.assert_array_equal(result[k], elements[k])


@pytest.mark.parametrize(
    ("leaves", "expected"),
    [
        ([1, 2, 3], np.array([1, 2, 3])),
        ([1.5, 2.0], np.array([1.5, 2.0])),
        ([True, False], np.array([True, False])),
        ([np.float32(1), np.float32(2)], np.array([1, 2], dtype=np.float32)),
        ([np.int8(-1), np.int8(3)], np.array([-1, 3], dtype=np.int8)),
        ([np.array(4), np.array(5)], np.array([4, 5])),
        (["ab", "c"], np.array(["ab", "c"])),
        ([b"x", b"yz"], np.array([b"x", b"yz"], dtype=object)),
    ],
    ids=["int", "float", "bool", "float32", "int8", "0-d array", "str", "bytes"],
)
def test_scalar_leaves_become_a_1d_array(leaves, expected):
    assert_same(stack(leaves), expected)


def test_bytes_leaves_keep_trailing_nul_bytes():
    records = [b"\x01\x00", b"\x00", b"", b"ab\x00\x00"]
    batch = stack([{"raw": r} for r in records])["raw"]
    assert batch.shape == (4,)
    assert batch.tolist() == records


def test_nested_dicts_lists_and_tuples():
    elements = [
        {
            "image": np.full((2, 2), k, dtype=np.uint8),
            "meta": {"id": k, "tags": [k, 10 * k], "pair": (float(k), np.int64(k))},
        }
        for k in range(3)
    ]
    expected = {
        "image": np.stack([np.full((2, 2), k, dtype=np.uint8) for k in range(3)]),
        "meta": {
            "id": np.array([0, 1, 2]),
            "tags": [np.array([0, 1, 2]), np.array([0, 10, 20])],
            "pair": (np.array([0.0, 1.0, 2.0]), np.array([0, 1, 2], dtype=np.int64)),
        },
    }
    assert_same(stack(elements), expected)


def test_namedtuple_type_is_preserved():
    result = stack([Point(np.zeros(2), 1), Point(np.ones(2), 2)])
    assert type(result) is Point
    assert_same(result.x, np.array([[0.0, 0.0], [1.0, 1.0]]))
    assert_same(result.y, np.array([1, 2]))
    pair = stack([Pair(1, {"a": 2}), Pair(3, {"a": 4})])
    assert type(pair) is Pair
    assert_same(pair.second, {"a": np.array([2, 4])})


def test_container_types_are_preserved():
    assert type(stack([(1, 2), (3, 4)])) is tuple
    assert type(stack([[1, 2], [3, 4]])) is list
    ordered = stack([collections.OrderedDict(b=1, a=2), collections.OrderedDict(b=3, a=4)])
    assert type(ordered) is collections.OrderedDict
    assert list(ordered) == ["b", "a"]


def test_dict_keys_in_another_order_still_stack_by_key():
    result = stack([{"a": 1, "b": 2}, {"b": 20, "a": 10}])
    assert_same(result["a"], np.array([1, 10]))
    assert_same(result["b"], np.array([2, 20]))


def test_single_element_gets_a_batch_axis_of_one():
    result = stack([{"x": np.arange(3)}])
    assert result["x"].shape == (1, 3)


def test_empty_containers_and_none_leaves_stack_to_themselves():
    assert stack([{}, {}]) == {}
    assert stack([(), ()]) == ()
    assert stack([None, None]) is None
    assert_same(
        stack([{"a": None, "b": 1}, {"a": None, "b": 2}]), {"a": None, "b": np.array([1, 2])}
    )


def test_elements_are_not_modified():
    elements = [{"x": np.arange(3)}, {"x": np.arange(3) + 1}]
    result = stack(elements)
    result["x"][0, 0] = 99
    np.testing.assert_array_equal(elements[0]["x"], np.arange(3))


# A recursive strategy: random trees of dicts, lists, tuples and array leaves,
# then several elements of that exact structure with different leaf values.

leaf_shapes = st.lists(st.integers(0, 3), max_size=3).map(tuple)


def structures():
    leaves = st.tuples(st.just("leaf"), leaf_shapes, st.sampled_from(["int32", "float64"]))
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.tuples(st.just("list"), st.lists(children, max_size=3)),
            st.tuples(st.just("tuple"), st.lists(children, max_size=3)),
            st.tuples(
                st.just("dict"),
                st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), children, max_size=3),
            ),
        ),
        max_leaves=8,
    )


def build(structure, value):
    kind = structure[0]
    if kind == "leaf":
        _, shape, dtype = structure
        return np.full(shape, value, dtype=dtype)
    if kind == "list":
        return [build(child, value + i) for i, child in enumerate(structure[1])]
    if kind == "tuple":
        return tuple(build(child, value + i) for i, child in enumerate(structure[1]))
    return {key: build(child, value) for key, child in structure[1].items()}


def expected_stack(structure, values):
    kind = structure[0]
    if kind == "leaf":
        _, shape, dtype = structure
        return np.stack([np.full(shape, v, dtype=dtype) for v in values])
    if kind == "list":
        return [expected_stack(c, [v + i for v in values]) for i, c in enumerate(structure[1])]
    if kind == "tuple":
        return tuple(expected_stack(c, [v + i for v in values]) for i, c in enumerate(structure[1]))
    return {key: expected_stack(c, values) for key, c in structure[1].items()}


@given(structure=structures(), values=st.lists(st.integers(0, 100), min_size=1, max_size=5))
@settings(max_examples=60, deadline=None)
def test_stack_of_any_tree_stacks_every_leaf(structure, values):
    elements = [build(structure, v) for v in values]
    assert_same(stack(elements), expected_stack(structure, values))


# -- mismatches ---------------------------------------------------------------------------

good = {"image": np.zeros((2, 2)), "label": 1, "extra": [1, 2], "meta": {"id": 3}}

MISMATCHES = {
    "leaf shape": ({**good, "image": np.zeros((2, 3))}, "['image']"),
    "leaf rank": ({**good, "image": np.zeros(4)}, "['image']"),
    "scalar vs array": ({**good, "label": np.array([1, 2])}, "['label']"),
    "missing key": ({k: v for k, v in good.items() if k != "label"}, "element"),
    "extra key": ({**good, "more": 1}, "element"),
    "nested key": ({**good, "meta": {"idx": 3}}, "['meta']"),
    "nested extra key": ({**good, "meta": {"id": 3, "x": 4}}, "['meta']"),
    "list length": ({**good, "extra": [1, 2, 3]}, "['extra']"),
    "container vs leaf": ({**good, "extra": 7}, "['extra']"),
    "leaf vs container": ({**good, "label": [1]}, "['label']"),
    "list vs tuple": ({**good, "extra": (1, 2)}, "['extra']"),
    "dict vs leaf": ({**good, "image": {"x": 1}}, "['image']"),
    "nested shape": ({**good, "extra": [1, np.zeros(2)]}, "['extra'][1]"),
}


@pytest.mark.parametrize("position", [1, 2])
@pytest.mark.parametrize(("odd", "path"), MISMATCHES.values(), ids=MISMATCHES.keys())
def test_mismatch_raises_value_error_naming_path_and_element(odd, path, position):
    elements = [good, good, good]
    elements[position] = odd
    with pytest.raises(ValueError, match="element") as error:
        stack(elements)
    message = str(error.value)
    assert path in message, message
    assert re.search(rf"\belement {position}\b", message), message
    other = 3 - position
    assert not re.search(rf"\belement {other}\b", message), message


def test_namedtuple_vs_plain_tuple_raises():
    with pytest.raises(ValueError, match="element 1"):
        stack([Point(1, 2), (1, 2)])


def test_ragged_top_level_arrays_raise():
    with pytest.raises(ValueError, match="element 2"):
        stack([np.zeros(3), np.zeros(3), np.zeros(5)])


def test_stack_of_nothing_raises():
    with pytest.raises(ValueError, match="empty"):
        stack([])


# -- through MapDataset.batch -------------------------------------------------------------


def test_batch_stacks_pytrees_by_default():
    ds = MapDataset.range(10).map(
        lambda i: Point(x={"a": np.full(3, i, dtype=np.float32), "b": i}, y=[i, (i, str(i))])
    )
    batch = ds.batch(4)[2]
    expected = Point(
        x={"a": np.stack([np.full(3, i, dtype=np.float32) for i in (8, 9)]), "b": np.array([8, 9])},
        y=[np.array([8, 9]), (np.array([8, 9]), np.array(["8", "9"]))],
    )
    assert_same(batch, expected)


def test_batch_mismatch_error_reaches_the_caller_with_path_and_element():
    records = [{"image": np.zeros(3)}, {"image": np.zeros(3)}, {"image": np.zeros(4)}]
    ds = MapDataset.source(records).batch(3)
    with pytest.raises(ValueError, match=re.escape("['image']")) as error:
        ds[0]
    assert re.search(r"\belement 2\b", str(error.value))
    with pytest.raises(ValueError, match=re.escape("['image']")):
        list(ds)
