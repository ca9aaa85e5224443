"""`reads_in_batches`: which sources pipelines may read with `__getitems__`.

Grain reads ``source[i]`` only. Ours calls a source's batched read only where
its class declares ``batched_reads = True`` (our own sources do), so that a
missing, broken or different `__getitems__` never changes what is read.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from grain_sources import (
    ArrayDataSource,
    ArrayRecordDataSource,
    BlockShuffle,
    RandomAccessDataSource,
    RangeDataSource,
    SharedMemoryDataSource,
    TFRecordDataSource,
    reads_in_batches,
    write_array_record,
    write_tfrecord,
    write_tfrecord_index,
)


class Plain:
    def __len__(self):
        return 6

    def __getitem__(self, index):
        return index * 10


class Undeclared(Plain):
    """`__getitems__` that gives something else than `__getitem__`, undeclared."""

    def __getitems__(self, indices):
        return [-1 for _ in indices]


class Declared(Plain):
    batched_reads = True

    def __getitems__(self, indices):
        return [i * 10 for i in indices]


class DecodesRecords(Declared):
    """A subclass that changes the records but inherits the batched read."""

    def __getitem__(self, index):
        return str(super().__getitem__(index))


class DecodesBoth(DecodesRecords):
    def __getitems__(self, indices):
        return [str(i * 10) for i in indices]


def test_our_sources_declare_batched_reads(tmp_path):
    write_array_record([b"a", b"b", b"c"], tmp_path / "data.array_record")
    write_tfrecord([b"a", b"b"], tmp_path / "data.tfrecord")
    write_tfrecord_index(str(tmp_path / "data.tfrecord"))
    array_record = ArrayRecordDataSource(str(tmp_path / "data.array_record"))
    tfrecord = TFRecordDataSource(str(tmp_path / "data.tfrecord"))
    shared = SharedMemoryDataSource([1, "a", None])
    try:
        sources = [
            RangeDataSource(0, 10, 2),
            ArrayDataSource(np.arange(4)),
            shared,
            array_record,
            tfrecord,
            BlockShuffle(RangeDataSource(0, 10, 1), 4, seed=0),
        ]
        for source in sources:
            assert reads_in_batches(source), type(source).__name__
            indices = [len(source) - 1, 0, 1]
            assert list(source.__getitems__(indices)) == [source[i] for i in indices]
    finally:
        array_record.close()
        shared.close()
    assert reads_in_batches(ArrayDataSource(np.arange(4)), "gather")
    assert not reads_in_batches(RangeDataSource(0, 4, 1), "gather"), "Range has no gather"


@pytest.mark.parametrize(
    "source",
    [[1, 2, 3], (1, 2), "abc", range(4), np.arange(5), {"a": 1}, Plain(), Undeclared()],
    ids=["list", "tuple", "str", "range", "ndarray", "dict", "plain", "undeclared"],
)
def test_other_sources_are_read_one_record_at_a_time(source):
    assert not reads_in_batches(source)
    assert not reads_in_batches(source, "gather")


def test_only_a_true_declaration_counts():
    for value in (1, "yes", None, False, np.True_):
        kind = type("Source", (Undeclared,), {"batched_reads": value})
        assert not reads_in_batches(kind()), repr(value)
    # A MagicMock makes up any attribute it is asked for, batched_reads too.
    fake = mock.MagicMock()
    fake.__len__.return_value = 3
    assert not reads_in_batches(fake)


def test_the_declaration_is_read_from_the_class_not_the_instance():
    source = Undeclared()
    source.batched_reads = True
    assert not reads_in_batches(source)


def test_a_declaration_without_getitems_is_refused():
    kind = type("Promises", (Plain,), {"batched_reads": True})
    with pytest.raises(TypeError, match=r"Promises declares `batched_reads = True`.*__getitems__"):
        reads_in_batches(kind())


def test_a_subclass_that_overrides_getitem_alone_is_read_one_by_one():
    assert reads_in_batches(Declared())
    assert not reads_in_batches(DecodesRecords())
    assert reads_in_batches(DecodesBoth())

    class Labelled(ArrayDataSource):
        def __getitem__(self, index):
            return {"x": super().__getitem__(index), "label": 1}

    labelled = Labelled(np.arange(4))
    assert not reads_in_batches(labelled)
    assert not reads_in_batches(labelled, "gather")


def test_the_protocol_still_accepts_any_sequence():
    # The declaration is not a member of the runtime-checkable protocol.
    assert isinstance([1, 2], RandomAccessDataSource)
    assert isinstance(Plain(), RandomAccessDataSource)
    assert "batched_reads" in (RandomAccessDataSource.__doc__ or "")


def test_block_shuffle_uses_an_undeclared_sources_getitem():
    inner = Undeclared()
    shuffled = BlockShuffle(inner, 2, seed=3)
    order = list(range(len(shuffled)))
    expected = [shuffled[i] for i in order]
    assert sorted(expected) == [0, 10, 20, 30, 40, 50]
    assert shuffled.__getitems__(order) == expected


def test_block_shuffle_uses_a_declared_sources_getitems():
    calls = []

    class Counted(Declared):
        def __getitems__(self, indices):
            calls.append(list(indices))
            return super().__getitems__(indices)

    shuffled = BlockShuffle(Counted(), 2, seed=3)
    got = shuffled.__getitems__([0, 1, 2])
    assert got == [shuffled[i] for i in range(3)]
    assert [len(call) for call in calls] == [3]
