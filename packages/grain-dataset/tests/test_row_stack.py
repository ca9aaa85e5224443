"""`RowStack`: a batch stacked as its elements come is exactly ``stack`` of them.

Large arrays are copied into the batch as each element arrives (`_row_stack.py`);
whatever the elements are (other structures, differing shapes, dtypes, keys or
types, a None, a short batch), the result must be what `stack` gives over all
of them, or the same error, and the elements handed back must equal those added.
Also checked through the three places that use it: `IterDataset.batch` in the
consumer, the read-ahead's readers, and `MapDataset.batch`.
"""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain_dataset as gd
from grain_dataset import stack
from grain_dataset._common import _row_stack
from grain_dataset._common._row_stack import RowStack, has_rows
from grain_dataset.extension import batch_allocator, set_batch_allocator

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def small_rows(monkeypatch):
    # Rows from 32 bytes: the property below runs on small arrays (60-byte images, which
    # are rows; their 120-byte int16 variant too).
    monkeypatch.setattr(_row_stack, "MIN_ROW_BYTES", 32)


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _same(got[key], want[key])
    elif isinstance(want, list | tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert got.flags.c_contiguous == want.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as error:  # the same type and message, whichever path raised it
        return "error", (type(error), str(error))


def _image(i, shape=(4, 5, 3), dtype=np.uint8):
    return (np.arange(np.prod(shape)).reshape(shape) + i).astype(dtype)


_KINDS = ("array", "dict", "tuple", "list")


def _element(kind, i, odd):
    image = _image(i)
    if odd == "shape":
        image = _image(i, (5, 4, 3))
    elif odd == "dtype":
        image = image.astype(np.int16)
    elif odd == "layout":
        image = np.asfortranarray(image)
    if odd == "none":
        return None
    if kind == "array":
        return image
    if kind == "dict":
        element = {"image": image, "label": i, "name": f"e{i}"}
        if odd == "key":
            element = {"image": image, "other": i, "name": f"e{i}"}
        elif odd == "leaf":
            element["label"] = [i]
        return element
    element = [image, i, np.float32(i) / 2]
    if odd == "key":
        element.append(0)
    elif odd == "leaf":
        element[1] = "x"
    return tuple(element) if kind == "tuple" else element


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    size=st.integers(1, 6),
    count=st.integers(1, 6),
    odd_at=st.integers(0, 6),
    odd=st.sampled_from(["shape", "dtype", "layout", "none", "key", "leaf", None]),
    allocator=st.booleans(),
)
def test_the_batch_is_stack_of_the_elements_whatever_they_are(
    kind, size, count, odd_at, odd, allocator
):
    count = min(count, size)
    values = [_element(kind, i, odd if i == odd_at else None) for i in range(count)]
    previous = batch_allocator()
    if allocator:
        set_batch_allocator(lambda shape, dtype: np.empty(shape, dtype))
    try:
        rows = RowStack(size)
        for value in values:
            rows.add(value)
        assert len(rows) == count
        if odd is None or odd_at >= count:
            assert rows.stacking  # the path under test, not the fallback
        elements = rows.elements()
        got = _outcome(rows.result)
        want = _outcome(lambda: stack(values))
    finally:
        set_batch_allocator(previous)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        _same(got[1], want[1])
    else:
        assert got[1] == want[1]
    assert len(elements) == count
    for element, value in zip(elements, values, strict=True):
        if value is None or (odd == "layout" and element is not value):
            continue  # a row given back is a C-ordered view: equal values, compared below
        _same(element, value)
    if odd == "layout":
        for element, value in zip(elements, values, strict=True):
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(element, value)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    short=st.booleans(),
    odd_at=st.integers(0, 12),
    odd=st.sampled_from(["shape", "dtype", "layout", "none", "key", "leaf", None]),
    order=st.randoms(use_true_random=False),
)
def test_a_batch_filled_in_parts_by_threads_is_stack_of_the_elements(
    kind, cuts, short, odd_at, odd, order
):
    # Parts of one batch (`SharedRows`), each filled by its own thread, in any order:
    # whichever part's first element comes first decides the rows.
    size = sum(cuts)
    values = [_element(kind, i, odd if i == odd_at else None) for i in range(size)]
    shared = _row_stack.SharedRows(size)
    parts, offset = [], 0
    for cut in cuts:
        parts.append((RowStack(cut, shared, offset), values[offset : offset + cut]))
        offset += cut
    if short:  # the last part ends early (the end of the epoch)
        parts[-1] = (parts[-1][0], parts[-1][1][:-1])
    added = [value for _, part_values in parts for value in part_values]
    threads = [
        threading.Thread(target=lambda r=rows, v=part_values: [r.add(x) for x in v])
        for rows, part_values in parts
    ]
    order.shuffle(threads)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    if not short and (odd is None or odd_at >= size):
        assert all(rows.whole for rows, _ in parts)  # the path under test
    got = _outcome(lambda: _row_stack.batch_of([rows for rows, _ in parts]))
    want = _outcome(lambda: stack(added))
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        _same(got[1], want[1])
    else:
        assert got[1] == want[1]
    elements = [element for rows, _ in parts for element in rows.elements()]
    assert len(elements) == len(added)
    for element, value in zip(elements, added, strict=True):
        if value is not None and odd != "layout":
            _same(element, value)


def test_parts_of_a_batch_write_one_allocation():
    handed_out = []

    def allocator(shape, dtype):
        handed_out.append(np.empty(shape, dtype))
        return handed_out[-1]

    previous = set_batch_allocator(allocator)
    try:
        shared = _row_stack.SharedRows(6)
        parts = [RowStack(2, shared, offset) for offset in (0, 2, 4)]
        for offset in (4, 0, 2):  # the last part first: it allocates the batch
            for i in range(offset, offset + 2):
                parts[offset // 2].add({"image": _image(i), "label": i})
        batch = _row_stack.batch_of(parts)
    finally:
        set_batch_allocator(previous)
    assert len(handed_out) == 1
    assert batch["image"] is handed_out[0]
    np.testing.assert_array_equal(batch["image"], np.stack([_image(i) for i in range(6)]))
    assert batch["label"].tolist() == list(range(6))


def test_large_arrays_are_copied_as_they_come_and_not_kept():
    import sys

    rows = RowStack(3)
    images = [_image(i) for i in range(3)]
    assert has_rows({"image": images[0]})
    for i, image in enumerate(images):
        before = sys.getrefcount(image)
        rows.add({"image": image, "label": i})
        assert sys.getrefcount(image) == before  # the element's array is not held
        image[...] = 0  # changed after it was added: the batch has its copy already
    assert rows.stacking
    batch = rows.result()
    np.testing.assert_array_equal(batch["image"], np.stack([_image(i) for i in range(3)]))
    assert batch["label"].tolist() == [0, 1, 2]


def test_elements_without_large_arrays_are_kept_for_stack(monkeypatch):
    monkeypatch.setattr(_row_stack, "MIN_ROW_BYTES", 1 << 16)
    assert not has_rows({"image": _image(0), "label": 1})
    assert has_rows(np.zeros((256, 256), np.uint8))
    assert has_rows((np.zeros((256, 256), np.uint8), 1))
    assert not has_rows(np.zeros((256, 256), object))
    rows = RowStack(2)
    rows.add({"image": _image(0)})
    assert not rows.stacking


def test_the_batch_allocators_memory_holds_the_rows():
    handed_out = []

    def allocator(shape, dtype):
        handed_out.append(np.empty(shape, dtype))
        return handed_out[-1]

    previous = set_batch_allocator(allocator)
    try:
        rows = RowStack(4)
        for i in range(4):
            rows.add((_image(i), i))
        batch = rows.result()
    finally:
        set_batch_allocator(previous)
    assert batch[0] is handed_out[0]  # written in place: the worker sends it without a copy
    np.testing.assert_array_equal(batch[0], np.stack([_image(i) for i in range(4)]))


def _big(i):
    return {"image": np.full((256, 256, 3), i % 256, np.uint8), "label": i}


def _want(n, size, drop):
    values = [_big(i) for i in range(n)]
    out = [stack(values[i : i + size]) for i in range(0, n, size)]
    return out[:-1] if drop and n % size else out


@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("drop", [False, True])
def test_batches_of_large_elements_are_those_of_stack(monkeypatch, threads, drop):
    monkeypatch.setattr(_row_stack, "MIN_ROW_BYTES", 1 << 16)
    options = gd.ReadOptions(num_threads=threads, prefetch_buffer_size=32)
    source = gd.MapDataset.range(45).map(_big)
    shapes = {
        "iterbatch": source.to_iter_dataset(options).batch(8, drop_remainder=drop),
        "mapbatch": source.batch(8, drop_remainder=drop).to_iter_dataset(options),
    }
    for ds in shapes.values():
        got = list(ds)
        want = _want(45, 8, drop)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)


def test_map_dataset_batch_reads_large_elements_a_megabyte_at_a_time(monkeypatch):
    monkeypatch.setattr(_row_stack, "MIN_ROW_BYTES", 1 << 16)
    calls = []
    lock = threading.Lock()

    class Source:
        batched_reads = True  # asked with __getitems__

        def __len__(self):
            return 64

        def __getitem__(self, index):
            return _big(index)

        def __getitems__(self, indices):
            with lock:
                calls.append(len(indices))
            return [_big(i) for i in indices]

    ds = gd.MapDataset.source(Source()).batch(32)
    first, second = ds[0], ds[1]
    _same(first, _want(32, 32, False)[0])
    _same(second, stack([_big(i) for i in range(32, 64)]))
    # The first batch in one read (it finds the elements large), the second one element,
    # then 196 KiB elements five at a time.
    assert calls[0] == 32
    assert calls[1:3] == [1, 5]
    assert sum(calls[1:]) == 32
