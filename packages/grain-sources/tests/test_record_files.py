"""RecordFiles: records of several files numbered end to end, read at any increasing positions."""

import concurrent.futures
import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_sources import (
    CorruptRecordError,
    JsonLinesRecordFiles,
    ParquetRecordFiles,
    RecordFilesDataSource,
    TFRecordRecordFiles,
    _record_files,
    write_tfrecord,
    write_tfrecord_index,
)
from grain_sources._checks import NoSuchFileError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Three files of uneven sizes, one of them empty: record numbers cross file ends.
SIZES = (37, 0, 58)


def _record(i):
    return {"id": i, "text": f"record {i}", "tags": list(range(i % 3))}


def _write_all(root):
    paths = {"parquet": [], "tfrecord": [], "jsonl": []}
    start = 0
    for f, size in enumerate(SIZES):
        records = [_record(i) for i in range(start, start + size)]
        start += size
        p = root / f"part{f}.parquet"
        table = pa.Table.from_pylist(records) if records else pa.Table.from_pylist([_record(0)])
        pq.write_table(table.slice(0, len(records)), p, row_group_size=10)
        paths["parquet"].append(str(p))
        t = root / f"part{f}.tfrecord"
        write_tfrecord([json.dumps(r).encode() for r in records], t)
        paths["tfrecord"].append(str(t))
        j = root / f"part{f}.jsonl"
        # Blank lines and a CRLF line are not records.
        lines = [json.dumps(r) for r in records]
        if lines:
            lines.insert(1, "")
            lines[0] += "\r"
        j.write_text("\n".join(lines) + ("\n\n" if lines else ""))
        paths["jsonl"].append(str(j))
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    paths = _write_all(tmp_path_factory.mktemp("records"))
    write_tfrecord_index(paths["tfrecord"][0])  # one file with a sidecar index, two without
    return {
        "parquet": ParquetRecordFiles(paths["parquet"]),
        "tfrecord": TFRecordRecordFiles(paths["tfrecord"]),
        "jsonl": JsonLinesRecordFiles(paths["jsonl"]),
    }


def _decode(kind, record):
    return json.loads(record) if kind == "tfrecord" else record


ALL = [_record(i) for i in range(sum(SIZES))]
KINDS = ("parquet", "tfrecord", "jsonl")


@pytest.mark.parametrize("kind", KINDS)
def test_counts_and_a_full_read(files, kind):
    source = files[kind]
    assert source.counts == list(SIZES)
    assert source.num_records == sum(SIZES)
    with source.reader() as reader:
        got = [_decode(kind, r) for r in reader.read(np.arange(sum(SIZES)))]
    assert got == ALL


@settings(max_examples=40, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("kind", KINDS)
def test_any_increasing_positions_read_their_records(files, kind, data):
    total = sum(SIZES)
    start = data.draw(st.integers(0, total - 1))
    step = data.draw(st.integers(1, 9))
    positions = np.arange(start, total, step)
    reader = files[kind].reader()
    # Read in blocks as an iterator does, the reader keeping its open file between them.
    block = data.draw(st.integers(1, 20))
    got = []
    for begin in range(0, len(positions), block):
        got += reader.read(positions[begin : begin + block])
    reader.close()
    assert [_decode(kind, r) for r in got] == [ALL[p] for p in positions]


@pytest.mark.parametrize("kind", KINDS)
def test_pickles_without_open_files(files, kind):
    source = files[kind]
    reader = source.reader()
    reader.read(np.array([3]))
    copy = pickle.loads(pickle.dumps(source))
    with copy.reader() as other:
        assert [_decode(kind, r) for r in other.read(np.array([40, 41]))] == ALL[40:42]
    reader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_positions_out_of_range_name_the_range(files, kind):
    with files[kind].reader() as reader, pytest.raises(IndexError, match=r"\[0, 95\)"):
        reader.read(np.array([94, 95]))


@pytest.mark.parametrize("kind", KINDS)
def test_positions_that_do_not_increase_are_refused(files, kind):
    with files[kind].reader() as reader:
        for positions in ([5, 3], [4, 4], [1, 60, 2]):
            with pytest.raises(ValueError, match="must increase"):
                reader.read(np.array(positions))


def test_missing_files_and_urls_fail_at_construction(tmp_path):
    for cls in (ParquetRecordFiles, TFRecordRecordFiles, JsonLinesRecordFiles):
        with pytest.raises(NoSuchFileError, match="does not exist"):
            cls([str(tmp_path / "missing.data")])
        with pytest.raises(ValueError, match="local files"):
            cls("s3://bucket/data")


def test_parquet_bad_columns_and_a_non_parquet_file(tmp_path, files):
    with pytest.raises(ValueError, match=r"no column\(s\) \['nope'\]"):
        ParquetRecordFiles(files["parquet"].paths, columns=["nope"])
    with pytest.raises(TypeError, match=r"columns=\['id'\]"):
        ParquetRecordFiles(files["parquet"].paths, columns="id")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        ParquetRecordFiles([str(bad)])
    only = ParquetRecordFiles(files["parquet"].paths, columns=["id"])
    with only.reader() as reader:
        assert reader.read(np.array([0, 94])) == [{"id": 0}, {"id": 94}]


def test_a_line_that_is_not_json_names_the_file_record_and_offset(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": 2\n{"a": 3}\n')
    source = JsonLinesRecordFiles(str(path))
    assert source.num_records == 3
    with source.reader() as reader:
        assert reader.read(np.array([0, 2])) == [{"a": 1}, {"a": 3}]
        with pytest.raises(ValueError, match=r"bad.jsonl.*record 1 \(the line at byte 9\)"):
            reader.read(np.array([1]))


def test_a_damaged_tfrecord_fails_with_its_offset(tmp_path):
    path = tmp_path / "bad.tfrecord"
    write_tfrecord([b"a" * 10, b"b" * 10, b"c" * 10], path)
    data = bytearray(path.read_bytes())
    data[26 + 12 + 3] ^= 0xFF  # a data byte of the second record (records are 26 bytes)
    path.write_bytes(bytes(data))
    source = TFRecordRecordFiles(str(path))
    with source.reader() as reader:
        assert reader.read(np.array([0, 2])) == [b"a" * 10, b"c" * 10]
        with pytest.raises(CorruptRecordError, match="byte offset 26 has a wrong data checksum"):
            reader.read(np.array([1]))
    # verify_crc=False reads it as it is.
    with TFRecordRecordFiles(str(path), verify_crc=False).reader() as reader:
        assert len(reader.read(np.array([1]))[0]) == 10


_LINES = [b"", b" ", b"\r", b"\t \r", b" \x0b\x0c ", b'{"a": 1}', b' {"b": 2} \r', b"[1, 2, 3]"]


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.sampled_from(_LINES), max_size=30),
    tail=st.sampled_from([b"", b"\n", b"\n\n", b" "]),
    chunk=st.integers(1, 48),
)
def test_json_lines_are_found_across_any_chunking(lines, tail, chunk, tmp_path_factory):
    data = b"\n".join(lines) + tail
    path = tmp_path_factory.mktemp("lines") / "data.jsonl"
    path.write_bytes(data)
    expected, position = [], 0
    for line in data.split(b"\n"):
        if line.strip():
            expected.append((position, position + len(line)))
        position += len(line) + 1
    original = _record_files._CHUNK_BYTES
    _record_files._CHUNK_BYTES = chunk  # small chunks cut lines anywhere
    try:
        starts, ends = _record_files._line_spans(str(path))
    finally:
        _record_files._CHUNK_BYTES = original
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_the_random_access_source_reads_any_indices(files, kind):
    source = RecordFilesDataSource(files[kind])
    assert len(source) == sum(SIZES)
    assert _decode(kind, source[-1]) == ALL[-1]
    assert _decode(kind, source[40]) == ALL[40]
    indices = [90, 3, 40, 3, 0, 94, 40]
    got = source.__getitems__(indices)
    assert [_decode(kind, r) for r in got] == [ALL[i] for i in indices]
    if kind != "tfrecord":  # bytes are immutable; dicts asked for twice are two objects
        assert got[1] is not got[3]
        assert got[2] is not got[6]
    with pytest.raises(IndexError, match="out of range"):
        source[95]
    copy = pickle.loads(pickle.dumps(source))
    assert [_decode(kind, r) for r in copy.__getitems__([94, 0])] == [ALL[94], ALL[0]]


@pytest.mark.timeout(60)
def test_the_random_access_source_reads_from_many_threads(files):
    source = RecordFilesDataSource(files["parquet"])
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, sum(SIZES), size=20) for _ in range(40)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(source.__getitems__, chunks))
    for chunk, rows in zip(chunks, results, strict=True):
        assert rows == [ALL[i] for i in chunk.tolist()]


def test_the_random_access_source_takes_record_files_only():
    with pytest.raises(TypeError, match="RecordFiles"):
        RecordFilesDataSource(["a.parquet"])
