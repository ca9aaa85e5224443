"""write_array_record: round trips, sharding (contiguous and round robin), serializers,
argument errors, atomicity (no partial files), progress output, and the writer options."""

import os
import pathlib
import pickle
import re

import numpy as np
import pytest

from grain_sources import ArrayRecordDataSource, _progress, write_array_record

ArrayRecordReader = pytest.importorskip(
    "array_record.python.array_record_module", reason="array-record has no free-threaded wheel"
).ArrayRecordReader


def read_file(path) -> list[bytes]:
    """All records of one file, read with the array_record reader itself."""
    reader = ArrayRecordReader(os.fspath(path))
    try:
        return [reader.read() for _ in range(reader.num_records())] if reader.num_records() else []
    finally:
        reader.close()


def read_source(pattern) -> list[bytes]:
    with ArrayRecordDataSource(pattern) as src:
        return list(src)


def records(n: int) -> list[bytes]:
    return [f"record {i}".encode() * (i % 5 + 1) for i in range(n)]


# -- round trips ------------------------------------------------------------------------------


def test_round_trip_of_bytes_like_records(tmp_path):
    given = [b"plain", bytearray(b"a bytearray"), memoryview(b"a memoryview"), b"", b"\x00\xff"]
    path = tmp_path / "mixed.array_record"
    assert write_array_record(given, path) == [str(path)]
    assert read_file(path) == [bytes(record) for record in given]
    assert read_source(str(path)) == [bytes(record) for record in given]


def test_one_shard_writes_exactly_the_path(tmp_path):
    path = str(tmp_path / "data")
    assert write_array_record(records(10), path) == [path]
    assert sorted(os.listdir(tmp_path)) == ["data"]
    assert read_file(path) == records(10)


def test_an_existing_file_is_replaced(tmp_path):
    path = tmp_path / "data"
    write_array_record([b"old"] * 3, path)
    write_array_record([b"new"], path)
    assert read_file(path) == [b"new"]
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_records_of_many_sizes(tmp_path):
    rng = np.random.default_rng(0)
    given = [rng.bytes(int(size)) for size in [0, 1, 100, 65536, 300_000, 7]]
    write_array_record(given, tmp_path / "sizes")
    assert read_file(tmp_path / "sizes") == given


# -- shards -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [4, 10, 13, 100])
def test_a_list_is_cut_into_contiguous_blocks(tmp_path, n):
    path = str(tmp_path / "data")
    given = records(n)
    finals = write_array_record(given, path, num_shards=4)
    assert finals == [f"{path}-{i:05d}-of-00004" for i in range(4)]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f) for f in finals)
    shards = [read_file(final) for final in finals]
    # Contiguous: concatenating the shards in order gives the input back.
    assert [record for shard in shards for record in shard] == given
    # Balanced: no shard holds more than its share, ceil(n / 4).
    assert max(len(shard) for shard in shards) == -(-n // 4)
    assert read_source(f"{path}@4") == given


@pytest.mark.parametrize("n", [4, 10, 13, 100])
def test_a_generator_is_dealt_round_robin(tmp_path, n):
    path = str(tmp_path / "data")
    given = records(n)
    finals = write_array_record((record for record in given), path, num_shards=4)
    assert finals == [f"{path}-{i:05d}-of-00004" for i in range(4)]
    for shard, final in enumerate(finals):
        assert read_file(final) == given[shard::4]
    assert sorted(read_source(f"{path}@4")) == sorted(given)


def test_more_shards_than_records_leaves_valid_empty_shards(tmp_path):
    path = str(tmp_path / "few")
    finals = write_array_record(records(3), path, num_shards=8)
    assert len(finals) == 8
    assert all(os.path.isfile(final) for final in finals)
    assert sum(len(read_file(final)) == 0 for final in finals) == 5
    assert read_source(f"{path}@8") == records(3)
    # The same from a generator, and with no records at all.
    finals = write_array_record(iter(records(3)), str(tmp_path / "gen"), num_shards=8)
    assert [len(read_file(final)) for final in finals] == [1, 1, 1, 0, 0, 0, 0, 0]
    write_array_record([], str(tmp_path / "none"), num_shards=3)
    with ArrayRecordDataSource(str(tmp_path / "none@3")) as src:
        assert len(src) == 0


def test_pathlike_path_with_shards(tmp_path):
    finals = write_array_record(records(6), pathlib.Path(tmp_path) / "p", num_shards=2)
    assert finals == [str(tmp_path / "p-00000-of-00002"), str(tmp_path / "p-00001-of-00002")]
    assert all(type(final) is str for final in finals)


# -- serializers ------------------------------------------------------------------------------


def test_pickle_serializer_with_arrays_and_dicts(tmp_path):
    given = [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        {"image": np.zeros((2, 2), np.uint8), "label": 7, "name": "seven"},
        [1, "two", 3.0],
        None,
    ]
    path = tmp_path / "pickled"
    write_array_record(given, path, serializer="pickle")
    back = [pickle.loads(record) for record in read_file(path)]
    np.testing.assert_array_equal(back[0], given[0])
    assert back[0].dtype == np.float32
    assert back[1].keys() == given[1].keys()
    np.testing.assert_array_equal(back[1]["image"], given[1]["image"])
    assert (back[1]["label"], back[1]["name"]) == (7, "seven")
    assert back[2:] == given[2:]


def test_custom_serializer(tmp_path):
    calls = []

    def encode(record):
        calls.append(record)
        return f"<{record}>".encode()

    path = tmp_path / "custom"
    write_array_record(range(5), path, serializer=encode)
    assert calls == list(range(5))
    assert read_file(path) == [b"<0>", b"<1>", b"<2>", b"<3>", b"<4>"]


def test_custom_serializer_may_return_bytearray(tmp_path):
    write_array_record([1, 2], tmp_path / "ba", serializer=lambda x: bytearray([x]))
    assert read_file(tmp_path / "ba") == [b"\x01", b"\x02"]


def test_serializer_returning_non_bytes_names_the_record(tmp_path):
    def encode(record):
        return record if record != 3 else "three"

    with pytest.raises(TypeError, match=r"serializer.*str.*record 3"):
        write_array_record([b"0", b"1", b"2", 3], tmp_path / "bad", serializer=encode)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("serializer", ["json", "Pickle", 5, b"pickle"])
def test_unknown_serializer(tmp_path, serializer):
    with pytest.raises(ValueError, match="`serializer`"):
        write_array_record([b"x"], tmp_path / "x", serializer=serializer)
    assert os.listdir(tmp_path) == []


# -- bad records leave nothing behind ---------------------------------------------------------


@pytest.mark.parametrize("num_shards", [1, 3])
@pytest.mark.parametrize(
    ("bad", "type_name"), [("text", "str"), (7, "int"), (np.zeros(3), "ndarray")]
)
def test_non_bytes_record_names_position_and_type_and_leaves_no_file(
    tmp_path, num_shards, bad, type_name
):
    given = [*records(600), bad, *records(5)]
    with pytest.raises(TypeError, match=rf"record 600 is {type_name}\b"):
        write_array_record(given, tmp_path / "out", num_shards=num_shards)
    assert os.listdir(tmp_path) == []  # neither the final names nor temporaries


def test_failed_write_keeps_the_previous_dataset(tmp_path):
    path = str(tmp_path / "data")
    write_array_record(records(8), path, num_shards=2)
    before = sorted(os.listdir(tmp_path))

    def failing():
        yield from records(100)
        raise RuntimeError("the input broke")

    with pytest.raises(RuntimeError, match="the input broke"):
        write_array_record(failing(), path, num_shards=2)
    assert sorted(os.listdir(tmp_path)) == before
    assert read_source(f"{path}@2") == records(8)


def test_serializer_error_propagates_and_leaves_nothing(tmp_path):
    def encode(record):
        if record == 2:
            raise ValueError("cannot encode 2")
        return b"ok"

    with pytest.raises(ValueError, match="cannot encode 2"):
        write_array_record(range(5), tmp_path / "x", serializer=encode)
    assert os.listdir(tmp_path) == []


# -- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_shards", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("2", TypeError),
        (None, TypeError),
    ],
)
def test_bad_num_shards(tmp_path, num_shards, error):
    with pytest.raises(error, match="`num_shards`"):
        write_array_record([b"x"], tmp_path / "x", num_shards=num_shards)
    assert os.listdir(tmp_path) == []


def test_numpy_integer_num_shards(tmp_path):
    paths = write_array_record([b"a", b"b"], tmp_path / "x", num_shards=np.int64(2))
    assert len(paths) == 2


def test_missing_directory(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "data"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
        write_array_record([b"x"], path)
    assert os.listdir(tmp_path) == []


def test_path_that_is_a_directory(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path / "adir"))):
        write_array_record([b"x"], tmp_path / "adir")
    assert os.listdir(tmp_path / "adir") == []


# -- progress ---------------------------------------------------------------------------------


@pytest.fixture
def fast_progress(monkeypatch):
    monkeypatch.setattr(_progress, "_QUIET_SECONDS", 0)
    monkeypatch.setattr(_progress, "_EVERY_SECONDS", 0)


def test_progress_true_reports_on_stderr(tmp_path, capsys, fast_progress):
    path = tmp_path / "long"
    write_array_record(records(2000), path, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"writing {path}" in captured.err
    assert "2,000 records" in captured.err
    assert captured.err.endswith("\n")
    assert read_file(path) == records(2000)


def test_progress_false_and_default_print_nothing(tmp_path, capsys, fast_progress):
    write_array_record(records(2000), tmp_path / "quiet", progress=False)
    write_array_record(records(2000), tmp_path / "default")  # stderr is not a terminal here
    assert capsys.readouterr() == ("", "")


def test_short_write_prints_nothing_even_with_progress(tmp_path, capsys):
    write_array_record(records(300), tmp_path / "short", progress=True)
    assert capsys.readouterr() == ("", "")


# -- writer options ---------------------------------------------------------------------------


def test_files_are_written_with_group_size_1(tmp_path):
    for final in write_array_record(records(50), tmp_path / "g", num_shards=2):
        reader = ArrayRecordReader(final)
        options = reader.writer_options_string()
        reader.close()
        assert "group_size:1," in options + ","


def test_custom_writer_options_are_used(tmp_path):
    path = write_array_record(records(50), tmp_path / "g8", options="group_size:8")[0]
    reader = ArrayRecordReader(path)
    assert "group_size:8," in reader.writer_options_string() + ","
    reader.close()
    assert read_file(path) == records(50)
