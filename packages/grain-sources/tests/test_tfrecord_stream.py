"""TFRecordStreamReader: TFRecord records from a stream the caller opened.

What must hold: it reads exactly what `write_tfrecord` wrote, from a file or
an in-memory stream; `tell()` after a record, given back to `seek`, continues
with the next one; a damaged or cut record raises at its offset and leaves the
position there; a subclass that only sets `stream` works; bad arguments are
named.
"""

import io

import pytest

from grain_sources import (
    CorruptRecordError,
    TFRecordReader,
    TFRecordStreamReader,
    TruncatedRecordError,
    write_tfrecord,
)

RECORDS = [b"", b"one", bytes(range(256)) * 5, b"x" * 70_000, b"last"]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "r.tfrecord"
    write_tfrecord(RECORDS, path)
    return path.read_bytes()


def test_reads_every_record_and_resumes_at_every_position(tmp_path, data):
    reader = TFRecordStreamReader(io.BytesIO(data))
    positions, records = [reader.tell()], []
    for record in reader:
        records.append(record)
        positions.append(reader.tell())
    assert records == RECORDS
    assert positions[-1] == len(data)
    # The positions are those the file reader reports.
    path = tmp_path / "same.tfrecord"
    path.write_bytes(data)
    with TFRecordReader(path) as file_reader:
        expected = [file_reader.position]
        for _ in file_reader:
            expected.append(file_reader.position)
    assert positions == expected
    for k, position in enumerate(positions):
        reader.seek(position)
        assert list(reader) == RECORDS[k:]


def test_reads_an_open_file(tmp_path, data):
    path = tmp_path / "f.tfrecord"
    path.write_bytes(data)
    with open(path, "rb") as file, TFRecordStreamReader(file) as reader:
        assert list(reader) == RECORDS
        assert str(path) in repr(reader)
    assert file.closed


def test_damage_raises_at_the_record_and_skips_nothing(data):
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    reader = TFRecordStreamReader(io.BytesIO(bytes(damaged)))
    assert [next(reader) for _ in range(4)] == RECORDS[:4]
    at = reader.tell()
    for _ in range(2):  # the same error again: the position stayed at the record
        with pytest.raises(CorruptRecordError, match=f"offset {at} has a wrong data checksum"):
            next(reader)
    assert reader.tell() == at
    unchecked = TFRecordStreamReader(io.BytesIO(bytes(damaged)), verify_crc=False)
    assert list(unchecked) == RECORDS
    bad_length = bytearray(data)
    bad_length[8] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="wrong length checksum"):
        next(TFRecordStreamReader(io.BytesIO(bytes(bad_length))))
    for cut in (3, len(RECORDS[-1]) + 6, len(data) - 2):
        reader = TFRecordStreamReader(io.BytesIO(data[:-cut]))
        with pytest.raises(TruncatedRecordError, match="truncated TFRecord"):
            list(reader)


def test_a_subclass_that_only_sets_the_stream(data):
    class Lazy(TFRecordStreamReader):
        def __init__(self, blob):
            self.stream = io.BytesIO(blob)

    reader = Lazy(data)
    assert reader.verify_crc is True
    assert list(reader) == RECORDS


def test_bad_arguments_are_named(data):
    with pytest.raises(TypeError, match="lacks read, seek, tell"):
        TFRecordStreamReader(b"bytes are not a stream")
    reader = TFRecordStreamReader(io.BytesIO(data))
    with pytest.raises(ValueError, match="`offset` must be an int >= 0"):
        reader.seek(-1)
    reader.seek(len(data) + 10)  # past the end: nothing more
    assert list(reader) == []
