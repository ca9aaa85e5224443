"""grain_convert.convert with the local executor: the plan, resume, a killed worker,
an interrupted driver, every input format, lengths, and bad input.

The `grain convert` command (the face's) is the driver where a test needs one in a
process of its own, as a user runs it; test_cli_convert.py tests the command itself."""

import json
import os
import pathlib
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest

from grain_convert import ConversionError, _inputs, convert, manifest
from grain_sources import ArrayRecordDataSource, write_tfrecord

# The `grain` command of this environment (the face's console script).
GRAIN = os.path.join(os.path.dirname(sys.executable), "grain")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip(
    "array_record",
    reason="grain convert writes ArrayRecord files: array-record has no free-threaded wheel",
)


def _read_back(pattern):
    with ArrayRecordDataSource(pattern) as source:
        return [source[i] for i in range(len(source))]


def _shard_bytes(result):
    return [pathlib.Path(path).read_bytes() for path in result.shards]


def _json_lines(directory, rows, files=2, blank_every=997):
    """Rows as JSON lines over several files, with blank lines and a BOM in the first."""
    directory.mkdir(exist_ok=True)
    per_file = -(-len(rows) // files)
    for number in range(files):
        chunk = rows[number * per_file : (number + 1) * per_file]
        lines = []
        for i, row in enumerate(chunk):
            if i % blank_every == 3:
                lines.append("   ")
            lines.append(json.dumps(row))
        text = "\n".join(lines) + ("\n" if number else "")  # the first file has no final newline
        (directory / f"part-{number}.jsonl").write_bytes(
            (b"\xef\xbb\xbf" if number == 0 else b"") + text.encode()
        )


def _rows(count):
    return [{"id": i, "text": "w " * (i % 13), "score": i / 7} for i in range(count)]


@pytest.mark.timeout(120)
def test_records_keep_the_global_order_and_the_plan_covers_them_once(tmp_path):
    rows = _rows(12_000)  # more than one seek stride (4096) per file
    _json_lines(tmp_path / "in", rows, files=3)
    plans = []
    result = convert(
        tmp_path / "in", tmp_path / "out/train", num_shards=7, workers=2, on_plan=plans.append
    )
    assert [json.loads(r) for r in _read_back(result.pattern)] == rows
    (plan,) = plans
    with open(result.plan_path) as file:
        assert json.load(file) == plan
    starts = [shard["start"] for shard in plan["shards"]]
    stops = [shard["stop"] for shard in plan["shards"]]
    assert (starts[0], stops[-1]) == (0, len(rows))
    assert starts[1:] == stops[:-1]
    with open(result.manifest_path) as file:
        written = json.load(file)
    assert written["plan_hash"] == plan["hash"]
    assert [shard["records"] for shard in written["shards"]] == [
        b - a for a, b in zip(starts, stops, strict=True)
    ]
    assert (result.written, result.num_records) == (7, len(rows))
    assert not [name for name in os.listdir(tmp_path / "out") if ".tmp-" in name]


@pytest.mark.timeout(120)
def test_one_worker_and_two_write_the_same_bytes(tmp_path):
    _json_lines(tmp_path / "in", _rows(3000))
    one = convert(tmp_path / "in", tmp_path / "a/x", num_shards=5, workers=1)
    two = convert(tmp_path / "in", tmp_path / "b/x", num_shards=5, workers=2)
    assert _shard_bytes(one) == _shard_bytes(two)


@pytest.mark.timeout(120)
def test_resume_redoes_only_the_shards_whose_marker_does_not_verify(tmp_path):
    rows = _rows(4000)
    _json_lines(tmp_path / "in", rows)
    first = convert(tmp_path / "in", tmp_path / "out/x", num_shards=8, workers=2)
    before = _shard_bytes(first)
    with pytest.raises(FileExistsError, match="pass --overwrite to replace it"):
        convert(tmp_path / "in", tmp_path / "out/x", num_shards=8)
    os.remove(first.shards[2] + ".done")  # killed between the rename and the marker
    os.remove(first.shards[5])  # a lost file
    with open(first.shards[6], "ab") as file:  # a file that is not the one marked
        file.write(b"junk")
    with open(first.shards[1] + ".tmp-123-abc", "wb") as file:  # a killed task's leftover
        file.write(b"half")
    again = convert(tmp_path / "in", tmp_path / "out/x", num_shards=8, workers=2, resume=True)
    assert again.written == 3
    assert _shard_bytes(again) == before
    assert not [name for name in os.listdir(tmp_path / "out") if ".tmp-" in name]
    # A changed input changes the plan of the shards that read it, and only theirs.
    with open(tmp_path / "in/part-1.jsonl", "a") as file:
        file.write(json.dumps({"id": -1}) + "\n")
    changed = convert(tmp_path / "in", tmp_path / "out/x", num_shards=8, workers=2, resume=True)
    assert 0 < changed.written < 8
    assert [json.loads(r) for r in _read_back(changed.pattern)] == [*rows, {"id": -1}]


def _kill_once(flag):
    """A transform that SIGKILLs its own worker process once, at record 1500."""

    def transform(row):
        if row["id"] == 1500 and not os.path.exists(flag):
            with open(flag, "w"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        return row

    return transform


@pytest.mark.timeout(120)
def test_a_killed_worker_loses_only_its_shard_which_is_written_again(tmp_path):
    rows = _rows(4000)
    _json_lines(tmp_path / "in", rows)
    flag = str(tmp_path / "killed")
    result = convert(
        tmp_path / "in", tmp_path / "out/x", num_shards=4, workers=2, transform=_kill_once(flag)
    )
    assert os.path.exists(flag)
    assert [pickle.loads(r) for r in _read_back(result.pattern)] == rows
    assert not [name for name in os.listdir(tmp_path / "out") if ".tmp-" in name]


_GATED_TRANSFORM = """
import os
import time

def gated(row):
    # Rows from {threshold} on wait for the flag: the first run never gets past them.
    while row["id"] >= {threshold} and not os.path.exists({flag!r}):
        time.sleep(0.01)
    return row
"""


@pytest.mark.timeout(180)
def test_an_interrupted_driver_resumes_with_only_the_unfinished_shards(
    tmp_path, interrupt_after_markers
):
    rows = _rows(8000)  # 500 a shard: shards 0-9 finish, 10-15 wait for the flag
    _json_lines(tmp_path / "in", rows)
    flag = tmp_path / "go"
    (tmp_path / "prep.py").write_text(_GATED_TRANSFORM.format(threshold=5000, flag=str(flag)))
    out = tmp_path / "out"
    command = [
        GRAIN, "convert", str(tmp_path / "in"), str(out / "x"),
        "--num-shards", "16", "--workers", "2", "--transform", f"{tmp_path / 'prep.py'}:gated",
    ]  # fmt: skip
    driver = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    err = interrupt_after_markers(driver, out, 10, timeout=120)
    assert driver.returncode == 130, err
    assert "grain convert: interrupted" in err
    assert sorted(n for n in os.listdir(out) if n.endswith(".done")) == [
        f"x-{i:05d}-of-00016.done" for i in range(10)
    ]
    assert not (out / "x.manifest.json").exists()
    plan = json.loads((out / "x.plan.json").read_text())
    for shard in plan["shards"]:  # whatever holds a final name is a whole shard
        if (out / shard["name"]).exists():
            assert len(_read_back(str(out / shard["name"]))) == shard["stop"] - shard["start"]
    flag.touch()
    done = subprocess.run(
        [*command, "--resume"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "(10 kept from an earlier run)" in done.stdout
    assert [pickle.loads(r) for r in _read_back(str(out / "x@16"))] == rows
    assert not [name for name in os.listdir(out) if ".tmp-" in name]


def _damage_middle(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as file:
        file.seek(size // 3)
        file.write(b"\xff" * 64)


@pytest.mark.timeout(120)
def test_a_damaged_parquet_file_is_named_with_its_row_and_no_manifest_is_written(tmp_path):
    (tmp_path / "in").mkdir()
    rows = _rows(3000)
    for number in range(3):
        pq.write_table(
            pa.Table.from_pylist(rows[number * 1000 : (number + 1) * 1000]),
            tmp_path / "in" / f"p{number}.parquet",
            row_group_size=250,
            compression="NONE",
            write_page_checksum=True,
        )
    _damage_middle(tmp_path / "in" / "p1.parquet")
    with pytest.raises(ConversionError) as excinfo:
        convert(tmp_path / "in", tmp_path / "out/x", num_shards=6, workers=2)
    message = str(excinfo.value)
    assert str(tmp_path / "in" / "p1.parquet") in message
    assert "row " in message
    assert not (tmp_path / "out/x.manifest.json").exists()
    assert not [name for name in os.listdir(tmp_path / "out") if ".tmp-" in name]


@pytest.mark.timeout(60)
def test_a_bad_json_line_is_named_by_its_line_number_past_a_seek_point(tmp_path):
    (tmp_path / "in").mkdir()
    lines = ['{"a": 1}'] * 9000
    lines[6500] = '{"a": '
    lines.insert(10, "")  # a blank line counts as a line, not a record
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConversionError, match=r"line 6502 of .*a\.jsonl is not JSON"):
        convert(tmp_path / "in", tmp_path / "out/x", num_shards=3, workers=1)
    assert not (tmp_path / "out/x.manifest.json").exists()


@pytest.mark.timeout(60)
def test_tfrecord_input_and_lengths_beside_the_shards(tmp_path):
    records = [bytes(range(i % 50)) * 3 for i in range(5000)]
    (tmp_path / "in").mkdir()
    write_tfrecord(records[:4500], tmp_path / "in" / "a.tfrecord")
    write_tfrecord(records[4500:], tmp_path / "in" / "b.tfrecord")
    result = convert(tmp_path / "in", tmp_path / "out/x", num_shards=4, workers=2, lengths=len)
    assert result.input_format == "tfrecord"
    assert _read_back(result.pattern) == records
    lengths = np.concatenate([np.load(path + ".lengths.npy") for path in result.shards])
    np.testing.assert_array_equal(lengths, [len(r) for r in records])
    with open(result.manifest_path) as file:
        written = json.load(file)
    assert written["lengths"]["total"] == sum(len(r) for r in records)
    assert manifest.check(result.manifest_path) == []


def _source_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name.startswith("grain_sources")]


@pytest.mark.timeout(60)
def test_tfrecord_inputs_get_the_sidecar_index_a_source_opens_without_a_pass(tmp_path, caplog):
    from grain_sources import TFRecordDataSource

    records = [bytes([i % 251]) * (i % 70) for i in range(3000)]
    (tmp_path / "in").mkdir()
    files = [tmp_path / "in" / "a.tfrecord", tmp_path / "in" / "b.tfrecord"]
    write_tfrecord(records[:1700], files[0])
    write_tfrecord(records[1700:], files[1])
    convert(tmp_path / "in", tmp_path / "out/x", num_shards=2, workers=1)
    for path in files:
        assert pathlib.Path(f"{path}.offsets.npy").is_file()
    caplog.clear()
    with caplog.at_level("WARNING"):
        source = TFRecordDataSource([str(path) for path in files])
    # A source that passes over a file says so (test_object_store shows the warning).
    assert _source_warnings(caplog) == []
    order = np.random.default_rng(3).permutation(len(records))
    assert source.__getitems__(order) == [records[i] for i in order]
    # The sidecars are not inputs: the same directory converts again.
    again = convert(tmp_path / "in", tmp_path / "out/y", num_shards=2, workers=1)
    assert again.input_format == "tfrecord"
    assert _read_back(again.pattern) == records


@pytest.mark.timeout(60)
def test_a_damaged_last_tfrecord_header_gets_no_sidecar_and_is_named_when_read(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_tfrecord([b"aa", b"b", b"cccc"], path)
    data = bytearray(path.read_bytes())
    data[35 + 8] ^= 0xFF  # the length checksum of the last record (it starts at byte 35)
    path.write_bytes(bytes(data))
    with pytest.raises(ConversionError, match=r"a\.tfrecord"):
        convert(path, tmp_path / "out/x", num_shards=1, workers=1)
    assert not pathlib.Path(f"{path}.offsets.npy").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change", ["file", "same_size_file", "damaged_sidecar"])
def test_a_sidecar_that_does_not_belong_to_its_file_is_rebuilt(tmp_path, caplog, change):
    from grain_sources import TFRecordDataSource

    path = tmp_path / "in" / "a.tfrecord"
    path.parent.mkdir()
    write_tfrecord([b"aa", b"b", b"cccc"], path)
    convert(path, tmp_path / "out/x", num_shards=1, workers=1)
    sidecar = pathlib.Path(f"{path}.offsets.npy")
    assert sidecar.is_file()
    records = {
        "file": [b"x" * 9, b"y"],
        "same_size_file": [b"a", b"b", b"ccccc"],  # the same size, other places
        "damaged_sidecar": [b"aa", b"b", b"cccc"],
    }[change]
    write_tfrecord(records, path)
    if change == "damaged_sidecar":
        sidecar.write_bytes(sidecar.read_bytes()[:20])
    caplog.clear()
    with caplog.at_level("WARNING"):
        source = TFRecordDataSource(str(path))
    assert any("does not belong to" in message for message in _source_warnings(caplog))
    assert [source[i] for i in range(len(source))] == records


@pytest.mark.timeout(60)
def test_a_change_the_sidecar_check_cannot_see_fails_when_the_record_is_read(tmp_path):
    from grain_sources import CorruptRecordError, TFRecordDataSource

    path = tmp_path / "a.tfrecord"
    write_tfrecord([b"aa", b"b", b"cccc"], path)
    convert(path, tmp_path / "out/x", num_shards=1, workers=1)
    write_tfrecord([b"a", b"bb", b"cccc"], path)  # only the first two records moved
    source = TFRecordDataSource(str(path))
    assert source[2] == b"cccc"
    with pytest.raises(CorruptRecordError, match=r"does not fill its place.*offsets\.npy"):
        source[0]


@pytest.mark.timeout(60)
def test_a_transform_and_field_lengths_reach_the_records(tmp_path):
    rows = _rows(500)
    _json_lines(tmp_path / "in", rows)
    result = convert(
        tmp_path / "in",
        tmp_path / "out/x",
        num_shards=3,
        workers=2,
        transform=lambda row: {"id": row["id"], "tokens": row["text"].split()},
        lengths="tokens",
        row_format="json",
    )
    back = [json.loads(r) for r in _read_back(result.pattern)]
    assert back == [{"id": r["id"], "tokens": r["text"].split()} for r in rows]
    with open(result.manifest_path) as file:
        written = json.load(file)
    assert written["lengths"]["of"] == "len(record['tokens'])"
    assert written["lengths"]["total"] == sum(len(r["text"].split()) for r in rows)


@pytest.mark.timeout(60)
def test_the_manifest_check_finds_a_damaged_shard(tmp_path):
    # `grain inspect` runs this check: test_cli_inspect.py has the command's side.
    _json_lines(tmp_path / "in", _rows(2000))
    result = convert(tmp_path / "in", tmp_path / "out/x", num_shards=2, workers=1)
    assert manifest.find(result.pattern) == manifest.find(result.shards[0]) == result.manifest_path
    assert manifest.check(result.manifest_path) == []
    _damage_middle(result.shards[1])
    (problem,) = manifest.check(result.manifest_path)
    assert result.shards[1] in problem


@pytest.mark.timeout(60)
def test_the_ray_executor_without_ray_says_what_to_install(tmp_path, monkeypatch):
    _json_lines(tmp_path / "in", _rows(10))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConversionError, match=r"pip install 'grainline\[ray\]'.*grain-convert"):
        convert(tmp_path / "in", tmp_path / "x", executor="ray")


def test_bad_arguments_name_the_argument(tmp_path):
    _json_lines(tmp_path / "in", _rows(10))
    with pytest.raises(ValueError, match="`executor` must be one of"):
        convert(tmp_path / "in", tmp_path / "x", executor="spark")
    with pytest.raises(ValueError, match="`num_shards` must be an int >= 1"):
        convert(tmp_path / "in", tmp_path / "x", num_shards=0)
    with pytest.raises(TypeError, match="`transform` must be a function"):
        convert(tmp_path / "in", tmp_path / "x", transform="upper")


@pytest.mark.parametrize("block", [1, 2, 5, 64, 1 << 24])
def test_the_json_lines_scan_agrees_with_a_line_by_line_count_at_any_block_size(
    tmp_path, monkeypatch, block
):
    monkeypatch.setattr(_inputs, "_BLOCK", block)
    monkeypatch.setattr(_inputs, "SEEK_STRIDE", 3)
    text = b'\xef\xbb\xbf{"a":1}\n\n  \n[2]\r\n"x"\n\t\n3\n\xef\xbb\xbf\n4\n5\n \n6\n7'
    path = tmp_path / "a.jsonl"
    path.write_bytes(text)
    expected_seek, count, offset = [], 0, 0
    for number, line in enumerate(text.split(b"\n"), 1):
        body = line[3:] if number == 1 and line.startswith(b"\xef\xbb\xbf") else line
        if body.strip():
            if count % 3 == 0:
                expected_seek.append([offset, count, number])
            count += 1
        offset += len(line) + 1
    (entry,) = _inputs.scan("jsonl", [str(path)])
    assert (entry.records, entry.seek) == (count, expected_seek)
    assert count == 9  # a BOM that does not open the file is text, not whitespace
