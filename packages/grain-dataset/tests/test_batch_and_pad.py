"""batch_and_pad: stack like the default batch_fn, then pad every leaf to batch_size rows.

Used as ``batch_fn=functools.partial(batch_and_pad, batch_size=n)`` on both
dataset kinds, every batch has `n` rows: the real rows equal `stack`'s, the
rest are `pad_value`; the opt-in mask marks the real rows.
"""

import collections
import functools

import numpy as np
import pytest

from grain_dataset import MapDataset, ReadOptions, stack
from grain_dataset._map_stages._pad import batch_and_pad

Point = collections.namedtuple("Point", ["x", "y"])


def element(i: int) -> dict:
    return {
        "image": np.full((2, 3), i, dtype=np.uint8),
        "label": i,
        "pos": Point(float(i), np.int16(-i)),
        "name": f"n{i}",
    }


def check_padded(batch, values, batch_size, pad_value):
    """The first len(values) rows equal stack(values); the others are pad_value."""
    stacked = stack(values)
    rows = len(values)

    def compare(padded, reference):
        if isinstance(reference, dict):
            assert type(padded) is type(reference)
            assert list(padded) == list(reference)
            for key in reference:
                compare(padded[key], reference[key])
        elif isinstance(reference, tuple):
            assert type(padded) is type(reference)
            for a, b in zip(padded, reference, strict=True):
                compare(a, b)
        else:
            assert padded.shape == (batch_size, *reference.shape[1:])
            assert padded.dtype == reference.dtype
            np.testing.assert_array_equal(padded[:rows], reference)
            if rows == batch_size:
                return
            pad = np.empty(padded[rows:].shape, dtype=reference.dtype)
            pad[...] = pad_value
            np.testing.assert_array_equal(padded[rows:], pad)

    compare(batch, stacked)


def test_docstring_example():
    ds = MapDataset.range(5).map(lambda i: {"x": np.full(2, i)})
    pad = functools.partial(batch_and_pad, batch_size=4, mask_key="mask")
    last = ds.batch(4, batch_fn=pad)[1]
    assert last["x"].tolist() == [[4, 4], [0, 0], [0, 0], [0, 0]]
    assert last["mask"].tolist() == [True, False, False, False]


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_pads_a_partial_batch(rows):
    values = [element(i + 1) for i in range(rows)]
    check_padded(batch_and_pad(values, batch_size=3), values, 3, 0)


def test_a_full_batch_equals_stack():
    values = [element(i) for i in range(4)]
    check_padded(batch_and_pad(values, batch_size=4), values, 4, 0)


def test_pad_value_is_cast_to_each_leaf():
    values = [{"f": np.ones(2, np.float32), "i": np.int64(3)}]
    batch = batch_and_pad(values, batch_size=3, pad_value=7)
    assert batch["f"].dtype == np.float32
    assert batch["f"].tolist() == [[1, 1], [7, 7], [7, 7]]
    assert batch["i"].tolist() == [3, 7, 7]


def test_none_leaves_stay_none():
    batch = batch_and_pad([{"x": 1, "y": None}], batch_size=2)
    assert batch["y"] is None
    assert batch["x"].tolist() == [1, 0]


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_as_batch_fn_every_batch_has_batch_size_rows(kind):
    ds = MapDataset.range(10).map(element)
    if kind == "iter":
        ds = ds.to_iter_dataset(ReadOptions(num_threads=0))
    pad = functools.partial(batch_and_pad, batch_size=4, pad_value=9)
    batches = list(ds.batch(4, batch_fn=pad))
    assert len(batches) == 3
    for b, batch in enumerate(batches):
        values = [element(i) for i in range(4 * b, min(4 * b + 4, 10))]
        check_padded(batch, values, 4, 9)


def test_filtered_elements_are_padded_over():
    ds = MapDataset.range(6).filter(lambda i: i != 4).to_iter_dataset()
    pad = functools.partial(batch_and_pad, batch_size=3, pad_value=-1, mask_key=None)
    assert [b.tolist() for b in ds.batch(3, batch_fn=pad)] == [[0, 1, 2], [3, 5, -1]]


# -- the mask ---------------------------------------------------------------------------------


def test_mask_marks_the_real_rows_and_comes_last():
    batch = batch_and_pad([element(1), element(2)], batch_size=5, mask_key="valid")
    assert list(batch) == ["image", "label", "pos", "name", "valid"]
    assert batch["valid"].dtype == np.bool_
    assert batch["valid"].tolist() == [True, True, False, False, False]


def test_mask_of_a_full_batch_is_all_true():
    batch = batch_and_pad([{"x": 1}, {"x": 2}], batch_size=2, mask_key="mask")
    assert batch["mask"].tolist() == [True, True]


def test_no_mask_by_default():
    assert list(batch_and_pad([{"x": 1}], batch_size=2)) == ["x"]


def test_mask_needs_dict_elements():
    with pytest.raises(TypeError, match=r"mask_key.*dict elements.*tuple"):
        batch_and_pad([(1, 2)], batch_size=2, mask_key="mask")
    with pytest.raises(TypeError, match="mask_key"):
        batch_and_pad([{"x": 1}], batch_size=2, mask_key=3)


def test_mask_key_must_be_new():
    with pytest.raises(ValueError, match="already have the key 'x'"):
        batch_and_pad([{"x": 1}], batch_size=2, mask_key="x")


# -- errors -----------------------------------------------------------------------------------


def test_more_values_than_batch_size():
    with pytest.raises(ValueError, match="got 3 values for batch_size=2"):
        batch_and_pad([1, 2, 3], batch_size=2)


@pytest.mark.parametrize(
    ("batch_size", "error"), [(0, ValueError), (-1, ValueError), (2.5, TypeError)]
)
def test_bad_batch_size(batch_size, error):
    with pytest.raises(error, match="batch_size"):
        batch_and_pad([1], batch_size=batch_size)


def test_empty_values():
    with pytest.raises(ValueError, match="`values` is empty"):
        batch_and_pad([], batch_size=2)


def test_batch_size_is_keyword_only():
    with pytest.raises(TypeError):
        batch_and_pad([1], 2)


def test_pad_value_that_does_not_fit_names_the_leaf():
    values = [{"pixels": np.zeros(2, np.uint8)}]
    with pytest.raises(ValueError, match=r"batch\['pixels'\] \(dtype uint8\).*pad_value=-1"):
        batch_and_pad(values, batch_size=2, pad_value=-1)
    with pytest.raises(ValueError, match=r"batch\['pixels'\]"):
        batch_and_pad(values, batch_size=2, pad_value="x")


def test_structure_errors_come_from_stack():
    with pytest.raises(ValueError, match="different keys"):
        batch_and_pad([{"x": 1}, {"y": 1}], batch_size=3)
