"""`grain inspect`: counts, sizes, writer options and decoded first records; error paths."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from grain._cli import main
from grain._cli_inspect import decode
from grain.convert import convert
from grain_sources import write_array_record


def _inspect(capsys, *args):
    code = main(["inspect", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _npy(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_counts_per_shard_total_size_and_options(capsys, tmp_path):
    records = [json.dumps({"id": i, "text": f"row {i}"}).encode() for i in range(10)]
    files = write_array_record(records, tmp_path / "train", num_shards=3)
    code, out, err = _inspect(capsys, tmp_path / "train@3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["file", "records", "size", "writer", "options"]
    for line, path, count in zip(lines[1:4], files, (4, 4, 2), strict=True):
        assert line.split()[:2] == [path, str(count)]
        assert "group_size:1" in line
        assert "zstd:3" in line
    size = sum(os.path.getsize(path) for path in files)
    assert lines[4].startswith(f"total: 3 files, 10 records, {size / 1e3:.1f} kB")
    assert lines[5] == "compression: zstd level 3; group_size 1: each record is read on its own"
    assert lines[6] == "first 3 records:"
    assert lines[7] == '  [0] json   {"id":0,"text":"row 0"}'
    assert lines[9] == '  [2] json   {"id":2,"text":"row 2"}'
    assert lines[10] == "decode them with .map(json.loads)"


def test_records_are_numbered_across_files_and_paths(capsys, tmp_path):
    write_array_record([b'"a"', b'"b"'], tmp_path / "one", num_shards=2)
    write_array_record([b'"c"'], tmp_path / "two.array_record")
    code, out, _ = _inspect(
        capsys, tmp_path / "one-*", tmp_path / "two.array_record", "--num-records", "5"
    )
    assert code == 0
    assert "total: 3 files, 3 records" in out
    assert "first 3 records:" in out
    assert '  [1] json   "b"' in out
    assert '  [2] json   "c"' in out


def test_a_directory_lists_its_array_record_files(capsys, tmp_path):
    write_array_record([b"x"] * 4, tmp_path / "data", num_shards=2)
    (tmp_path / "notes.txt").write_text("not a shard")
    code, out, _ = _inspect(capsys, tmp_path, "--num-records", "0")
    assert code == 0
    assert "data-00000-of-00002" in out
    assert "data-00001-of-00002" in out
    assert "notes.txt" not in out
    assert "first" not in out


@pytest.mark.parametrize(
    ("record", "kind", "preview"),
    [
        (
            _npy(np.arange(12, dtype=np.int32).reshape(3, 4)),
            "npy",
            "int32[3,4] [0, 1, 2, 3, 4, 5, ...]",
        ),
        (_npy(np.zeros((0, 2))), "npy", "float64[0,2]"),
        (b'{"a": [1, 2]}', "json", '{"a":[1,2]}'),
        ("héllo wörld".encode(), "text", "'héllo wörld'"),
        (b"\x00\x01\xfe\xff", "bytes", "4 bytes: 00 01 fe ff"),
    ],
)
def test_decode_recognizes_formats(record, kind, preview):
    assert decode(record) == (kind, preview)


def test_pickles_written_by_write_array_record_are_decoded(capsys, tmp_path):
    values = [{"image": np.ones((2, 2), np.uint8), "label": 3, "name": b"abc"}, [1, 2], "s"]
    write_array_record(values, tmp_path / "p", serializer="pickle")
    code, out, _ = _inspect(capsys, tmp_path / "p")
    assert code == 0
    assert (
        "  [0] pickle {'image': uint8[2,2] [1, 1, 1, 1], 'label': 3, 'name': bytes[3] b'abc'}"
        in out
    )
    assert "  [1] pickle [1, 2]" in out
    assert "  [2] pickle 's'" in out
    assert "decode them with .map(pickle.loads)" in out


def test_a_pickle_of_an_unknown_class_is_named_not_loaded():
    record = b"\x80\x02cno_such_module_for_grain\nThing\nq\x00)\x81q\x01."
    kind, preview = decode(record)
    assert kind == "pickle"
    assert preview.startswith("(cannot unpickle here: ModuleNotFoundError")


def test_raw_bytes_show_a_hex_preview_and_long_records_are_clipped(capsys, tmp_path):
    write_array_record([bytes(range(40)), json.dumps(list(range(200))).encode()], tmp_path / "r")
    code, out, _ = _inspect(capsys, tmp_path / "r")
    assert code == 0
    assert "  [0] bytes  40 bytes: 00 01 02 03" in out
    assert out.splitlines()[-2].endswith("...")
    assert len(out.splitlines()[-2]) < 200
    assert "decode them with" not in out  # two formats


def test_other_compression_and_group_size(capsys, tmp_path):
    write_array_record([b"a", b"b"], tmp_path / "g", options="group_size:2,brotli:5")
    code, out, _ = _inspect(capsys, tmp_path / "g")
    assert code == 0
    assert "compression: brotli level 5; group_size 2: a random read decompresses a group" in out


def test_a_missing_path_is_one_line_and_exit_2(capsys, tmp_path):
    missing = tmp_path / "missing.array_record"
    assert _inspect(capsys, missing) == (
        2,
        "",
        f"grain inspect: error: no such file or directory: {missing}\n",
    )
    code, _, err = _inspect(capsys, tmp_path / "none-*")
    assert code == 2
    assert err == f"grain inspect: error: no file matches the pattern '{tmp_path / 'none-*'}'.\n"
    code, _, err = _inspect(capsys, tmp_path / "x@2")
    assert code == 2
    assert "needs 2 files named" in err


def test_a_directory_without_array_record_files_exits_2(capsys, tmp_path):
    (tmp_path / "a.txt").write_text("x")
    code, _, err = _inspect(capsys, tmp_path)
    assert code == 2
    assert "is a directory without ArrayRecord files" in err


def test_a_file_of_another_format_exits_2_and_says_so(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n' * 100)
    code, out, err = _inspect(capsys, tmp_path / "a.jsonl")
    assert code == 2
    assert out == ""
    assert err == (
        f"grain inspect: error: {tmp_path / 'a.jsonl'} is not an ArrayRecord file: write "
        f"ArrayRecord files from it with `grain convert {tmp_path / 'a.jsonl'} DEST`\n"
    )


def test_a_damaged_array_record_file_exits_1(capsys, tmp_path):
    write_array_record([b"x" * 100] * 2000, tmp_path / "good.array_record")
    data = (tmp_path / "good.array_record").read_bytes()
    (tmp_path / "cut.array_record").write_bytes(data[: len(data) // 2])
    code, _, err = _inspect(capsys, tmp_path / "cut.array_record")
    assert code == 1
    assert "is not a readable ArrayRecord file" in err
    assert len(err.splitlines()) == 1


@pytest.mark.timeout(60)
def test_the_console_script_exits_2_on_a_missing_path(tmp_path):
    missing = tmp_path / "missing"
    result = subprocess.run(
        [sys.executable, "-m", "grain._cli", "inspect", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == f"grain inspect: error: no such file or directory: {missing}\n"


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["inspect"])
    assert excinfo.value.code == 2
    with pytest.raises(SystemExit) as excinfo:
        main(["inspect", "x", "--num-records", "-1"])
    assert excinfo.value.code == 2
    assert "--num-records must be >= 0" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_damaged_shard_is_found_through_the_manifest_of_grain_convert(capsys, tmp_path):
    pytest.importorskip("array_record", reason="array-record has no free-threaded wheel")
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(2000)))
    result = convert(tmp_path / "a.jsonl", tmp_path / "out/x", num_shards=2, workers=1)
    code, out, _ = _inspect(capsys, result.manifest_path, "--num-records", "0")
    assert code == 0
    assert "counts and checksums match" in out
    size = os.path.getsize(result.shards[1])
    with open(result.shards[1], "r+b") as file:
        file.seek(size // 3)
        file.write(b"\xff" * 64)
    code, _, err = _inspect(capsys, result.pattern, "--num-records", "0")
    assert code == 1
    assert f"do not match {result.manifest_path}" in err
    assert result.shards[1] in err
