"""TFRecord files: the framing, round trips, exact resumes, and damaged files."""

import gc
import os
import pickle
import struct
import warnings

import numpy as np
import pytest

from grain_sources import _crc32c
from grain_sources._tfrecord import (
    CorruptRecordError,
    TFRecordReader,
    TruncatedRecordError,
    masked_crc,
    write_tfrecord,
)

google_crc32c = pytest.importorskip("google_crc32c")

RECORDS = [b"first", b"", b"x" * 300, bytes(range(256)), b"last one"]


def reference_masked_crc(data):
    crc = google_crc32c.value(bytes(data))
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def reference_file(records):
    """The bytes of a TFRecord file, framed independently of the module under test."""
    out = bytearray()
    for record in records:
        length = struct.pack("<Q", len(record))
        out += length + struct.pack("<I", reference_masked_crc(length))
        out += record + struct.pack("<I", reference_masked_crc(record))
    return bytes(out)


def offsets(records):
    """The byte offset of each record, then the file size."""
    result = [0]
    for record in records:
        result.append(result[-1] + 16 + len(record))
    return result


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "data.tfrecord"
    assert write_tfrecord(RECORDS, path) == len(RECORDS)
    return path


def read_all(path, **kwargs):
    with TFRecordReader(path, **kwargs) as reader:
        return list(reader)


# -- writing and the format -------------------------------------------------------


def test_writer_produces_the_tfrecord_framing(path):
    assert path.read_bytes() == reference_file(RECORDS)


def test_masked_crc_matches_the_definition():
    for data in (b"", b"a", b"123456789", bytes(range(200))):
        assert masked_crc(data) == reference_masked_crc(data)


def test_round_trip(path):
    records = read_all(path)
    assert records == RECORDS
    assert all(type(record) is bytes for record in records)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.tfrecord"
    assert write_tfrecord([], path) == 0
    assert path.stat().st_size == 0
    assert read_all(path) == []


def test_only_empty_records(tmp_path):
    path = tmp_path / "e.tfrecord"
    write_tfrecord([b""] * 3, path)
    assert read_all(path) == [b""] * 3


def test_large_records(tmp_path):
    rng = np.random.default_rng(0)
    big = [rng.integers(0, 256, (1 << 20) + i, dtype=np.uint8).tobytes() for i in range(3)]
    path = tmp_path / "big.tfrecord"
    write_tfrecord(big, path)
    assert path.read_bytes() == reference_file(big)
    assert read_all(path) == big


def test_large_records_with_the_numpy_crc(tmp_path, monkeypatch):
    monkeypatch.setattr(_crc32c, "_implementation", _crc32c.value_numpy)
    big = [np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes(), b"z"]
    path = tmp_path / "big.tfrecord"
    write_tfrecord(big, path)
    assert path.read_bytes() == reference_file(big)
    assert read_all(path) == big


def test_writer_accepts_bytes_like_records(tmp_path):
    path = tmp_path / "b.tfrecord"
    array = np.arange(6, dtype=np.int16)
    records = [bytearray(b"ab"), memoryview(b"cde"), memoryview(array), memoryview(b"0123")[::2]]
    assert write_tfrecord(iter(records), path) == 4
    assert read_all(path) == [b"ab", b"cde", array.tobytes(), b"02"]


@pytest.mark.parametrize("bad", ["text", 3, None, [b"a"]])
def test_writer_rejects_non_bytes_records(tmp_path, bad):
    with pytest.raises(TypeError, match=rf"record 2 must be bytes.*got {type(bad).__name__}"):
        write_tfrecord([b"a", b"b", bad], tmp_path / "x.tfrecord")


def test_writer_takes_str_and_pathlike_paths(tmp_path):
    write_tfrecord([b"a"], str(tmp_path / "s.tfrecord"))
    assert read_all(str(tmp_path / "s.tfrecord")) == [b"a"]


# -- positions --------------------------------------------------------------------


def test_position_and_index_advance_record_by_record(path):
    expected = offsets(RECORDS)
    with TFRecordReader(path) as reader:
        seen = [(reader.position, reader.index)]
        for _ in reader:
            seen.append((reader.position, reader.index))
    assert seen == [(offset, i) for i, offset in enumerate(expected)]


@pytest.mark.parametrize("k", range(len(RECORDS) + 1))
def test_resume_at_every_position_gives_exactly_the_tail(path, k):
    with TFRecordReader(path) as reader:
        for _ in range(k):
            next(reader)
        state = (reader.position, reader.index)
    with TFRecordReader(path, offset=state[0], index=state[1]) as resumed:
        assert list(resumed) == RECORDS[k:]
        assert resumed.index == len(RECORDS)
        assert resumed.position == path.stat().st_size


def test_seek_moves_back_and_forth_on_one_reader(path):
    starts = offsets(RECORDS)
    with TFRecordReader(path) as reader:
        assert next(reader) == RECORDS[0]
        for k in (4, 1, 3, 0, 5, 2):
            reader.seek(starts[k], k)
            assert list(reader) == RECORDS[k:]


def test_pickle_mid_way(path):
    with TFRecordReader(path) as reader:
        next(reader)
        next(reader)
        copy = pickle.loads(pickle.dumps(reader))
        assert (copy.position, copy.index) == (reader.position, reader.index)
        with copy:
            assert list(copy) == RECORDS[2:]
        assert list(reader) == RECORDS[2:]


def test_pickle_holds_no_file_handle(path):
    with TFRecordReader(path) as reader:
        next(reader)
        payload = pickle.dumps(reader)
    assert len(payload) < 500


def test_close_then_read_reopens_at_the_position(path):
    reader = TFRecordReader(path)
    assert next(reader) == RECORDS[0]
    reader.close()
    reader.close()
    assert next(reader) == RECORDS[1]
    reader.close()


def test_file_is_opened_lazily_and_closed_at_the_end(path):
    reader = TFRecordReader(path)
    assert reader._file is None
    next(reader)
    assert reader._file is not None
    list(reader)
    assert reader._file is None


def test_context_manager_closes(path):
    with TFRecordReader(path) as reader:
        next(reader)
    assert reader._file is None


def test_abandoned_reader_leaks_no_file(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = TFRecordReader(path)
        next(reader)
        del reader
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# -- wrong arguments ---------------------------------------------------------------


def test_missing_path(tmp_path):
    missing = tmp_path / "nope.tfrecord"
    with pytest.raises(FileNotFoundError, match=r"nope\.tfrecord"):
        TFRecordReader(missing)


def test_directory(tmp_path):
    with pytest.raises(IsADirectoryError, match=str(tmp_path.name)):
        TFRecordReader(tmp_path)


@pytest.mark.parametrize("offset", [-1, 1.0, "0", True, None])
def test_seek_rejects_non_offsets(path, offset):
    with pytest.raises(ValueError, match="offset"):
        TFRecordReader(path, offset=offset)


def test_seek_rejects_negative_index(path):
    with pytest.raises(ValueError, match="index"):
        TFRecordReader(path, index=-1)


def test_seek_past_the_end(path):
    size = path.stat().st_size
    with pytest.raises(ValueError, match=f"past the end.*{size} bytes"):
        TFRecordReader(path, offset=size + 1)
    with TFRecordReader(path, offset=size) as reader:
        assert list(reader) == []


def test_seek_to_the_middle_of_a_record_is_detected(path):
    with pytest.raises(CorruptRecordError, match=r"offset 3 .*not the start of a record"):
        TFRecordReader(path, offset=3)
    with TFRecordReader(path) as reader, pytest.raises(CorruptRecordError):
        reader.seek(offsets(RECORDS)[2] + 1, 2)


def test_failed_seek_keeps_the_position(path):
    with TFRecordReader(path) as reader:
        next(reader)
        with pytest.raises(CorruptRecordError):
            reader.seek(5, 9)
        assert (reader.position, reader.index) == (offsets(RECORDS)[1], 1)
        assert list(reader) == RECORDS[1:]


def test_bad_buffer_size(path):
    with pytest.raises(ValueError, match="buffer_size"):
        TFRecordReader(path, buffer_size=0)


@pytest.mark.parametrize("buffer_size", [1, 2, 7, 4096])
def test_small_buffer_reads_the_same(path, buffer_size):
    assert read_all(path, buffer_size=buffer_size) == RECORDS


# -- damaged files -----------------------------------------------------------------


def damage(path, position):
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(bytes(data))


BAD = 2  # the damaged record; the ones before it still read


@pytest.mark.parametrize(
    ("where", "delta"),
    [("length", 0), ("length", 7), ("length_crc", 8), ("data", 12), ("data", 100), ("crc", -1)],
)
def test_corrupt_byte_names_file_and_offset(path, where, delta):
    start, end = offsets(RECORDS)[BAD], offsets(RECORDS)[BAD + 1]
    damage(path, (end + delta) if delta < 0 else (start + delta))
    with TFRecordReader(path) as reader:
        assert [next(reader) for _ in range(BAD)] == RECORDS[:BAD]
        with pytest.raises(CorruptRecordError) as info:
            next(reader)
        # The error is repeatable: the position stays at the bad record.
        with pytest.raises(CorruptRecordError):
            next(reader)
        assert reader.position == start
    assert info.value.offset == start
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert f"offset {start}" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_verify_crc_false_skips_the_checksums(path):
    start = offsets(RECORDS)[BAD]
    damage(path, start + 12 + 5)  # a data byte
    damage(path, offsets(RECORDS)[BAD + 1] - 1)  # a data-CRC byte of the same record
    with pytest.raises(CorruptRecordError, match="data checksum"):
        read_all(path)
    records = read_all(path, verify_crc=False)
    assert len(records) == len(RECORDS)
    assert records[BAD] != RECORDS[BAD]
    assert records[BAD][5] == RECORDS[BAD][5] ^ 0x01
    assert records[:BAD] + records[BAD + 1 :] == RECORDS[:BAD] + RECORDS[BAD + 1 :]


def test_verify_crc_false_still_detects_impossible_lengths(path):
    # A flipped high length bit asks for far more bytes than the file holds.
    data = bytearray(path.read_bytes())
    data[offsets(RECORDS)[1] + 6] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(TruncatedRecordError, match=f"offset {offsets(RECORDS)[1]}"):
        read_all(path, verify_crc=False)


def test_truncated_file_at_every_cut_point(tmp_path, path):
    full = path.read_bytes()
    starts = offsets(RECORDS)
    cut_path = tmp_path / "cut.tfrecord"
    for cut in range(len(full) + 1):
        cut_path.write_bytes(full[:cut])
        if cut in starts:
            assert read_all(cut_path) == RECORDS[: starts.index(cut)]
            continue
        bad = max(i for i, start in enumerate(starts) if start < cut)
        with TFRecordReader(cut_path) as reader:
            assert [next(reader) for _ in range(bad)] == RECORDS[:bad]
            with pytest.raises(TruncatedRecordError) as info:
                next(reader)
        assert info.value.offset == starts[bad], cut
        assert str(cut_path) in str(info.value)
        assert "truncated" in str(info.value)


def test_partial_header_at_the_end_is_truncation(tmp_path):
    path = tmp_path / "p.tfrecord"
    path.write_bytes(reference_file([b"abc"]) + b"\x03\x00\x00")
    with pytest.raises(TruncatedRecordError, match="only 3 of the 12 header bytes"):
        read_all(path)


def test_not_a_tfrecord_file(tmp_path):
    path = tmp_path / "text.tfrecord"
    path.write_text("this is plain text, not TFRecord framing at all\n")
    reader = TFRecordReader(path)  # opens nothing yet
    with pytest.raises(CorruptRecordError, match="offset 0"):
        next(reader)
    reader.close()
    with pytest.raises(CorruptRecordError, match="offset 0"):
        read_all(path, verify_crc=False)


def test_truncated_error_is_a_corrupt_record_error():
    assert issubclass(TruncatedRecordError, CorruptRecordError)
    assert issubclass(CorruptRecordError, ValueError)


def test_file_written_by_hand_with_many_records(tmp_path):
    rng = np.random.default_rng(3)
    records = [
        rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 99, 500)
    ]
    path = tmp_path / "many.tfrecord"
    path.write_bytes(reference_file(records))
    assert read_all(path) == records
    assert os.path.getsize(path) == offsets(records)[-1]
