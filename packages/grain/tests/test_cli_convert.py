"""`grain convert`: every input format, written, counted and read back; every error path."""

import io
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import grain
from grain._cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip(
    "array_record",
    reason="grain convert writes ArrayRecord files: array-record has no free-threaded wheel",
)


def _read_back(pattern):
    with grain.sources.ArrayRecordDataSource(pattern) as source:
        return [source[i] for i in range(len(source))]


def _convert(capsys, *args):
    code = main(["convert", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(count):
    return [{"id": i, "text": f"row {i}", "values": [i * 0.5, -i]} for i in range(count)]


def _write_parquet(path, rows, row_group_size=16):
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_json_lines_each_line_a_record_in_order(capsys, tmp_path, suffix):
    rows = _rows(50)
    lines = [json.dumps(row) for row in rows]
    lines.insert(10, "")  # blank lines are not records
    (tmp_path / f"data{suffix}").write_text("\n".join(lines) + "\n\n")
    code, out, err = _convert(
        capsys, tmp_path / f"data{suffix}", tmp_path / "out" / "train", "--num-shards", "3"
    )
    assert code == 0, err
    assert "(JSON lines, 1 file, 50 records)" in out
    assert "wrote 50 records" in out
    assert "into 3 ArrayRecord shards" in out
    assert "read back 50 records with grain.sources.ArrayRecordDataSource" in out
    assert ".map(json.loads)" in out
    assert err == ""  # stderr is not a terminal: no progress bar
    records = _read_back(str(tmp_path / "out" / "train@3"))
    assert [json.loads(record) for record in records] == rows
    assert records[0] == json.dumps(rows[0]).encode()  # the line's own bytes


def test_parquet_rows_are_pickled_dicts_by_default(capsys, tmp_path):
    rows = [{**row, "blob": bytes([i % 256]) * 3} for i, row in enumerate(_rows(70))]
    _write_parquet(tmp_path / "data.parquet", rows)
    code, out, err = _convert(
        capsys, tmp_path / "data.parquet", tmp_path / "rows", "--num-shards", "2"
    )
    assert code == 0, err
    assert "(Parquet, 1 file, 70 records)" in out
    assert ".map(pickle.loads)" in out
    assert [pickle.loads(r) for r in _read_back(str(tmp_path / "rows@2"))] == rows


def test_parquet_rows_as_json(capsys, tmp_path):
    rows = _rows(20)
    _write_parquet(tmp_path / "data.parquet", rows)
    code, out, _ = _convert(
        capsys, tmp_path / "data.parquet", tmp_path / "rows.array_record", "--row-format", "json"
    )
    assert code == 0
    assert "into 1 ArrayRecord file" in out
    assert ".map(json.loads)" in out
    assert [json.loads(r) for r in _read_back(str(tmp_path / "rows.array_record"))] == rows


def test_a_value_json_cannot_hold_names_its_column_and_writes_no_shard(capsys, tmp_path):
    _write_parquet(tmp_path / "data.parquet", [{"id": 1, "image": b"\x89PNG"}])
    code, _, err = _convert(
        capsys, tmp_path / "data.parquet", tmp_path / "out", "--row-format", "json"
    )
    assert code == 1
    assert err.strip() == (
        f"grain convert: error: row 0 of {tmp_path / 'data.parquet'}: column 'image' holds "
        "bytes, which JSON cannot store: use --row-format pickle"
    )
    # The plan is written first; no shard, temporary file or manifest is left.
    assert sorted(os.listdir(tmp_path)) == ["data.parquet", "out.plan.json"]


def test_a_directory_of_parquet_files_is_read_in_name_order(capsys, tmp_path):
    rows = _rows(30)
    (tmp_path / "parts").mkdir()
    _write_parquet(tmp_path / "parts" / "part-1.parquet", rows[20:])
    _write_parquet(tmp_path / "parts" / "part-0.parquet", rows[:20])
    code, out, _ = _convert(capsys, tmp_path / "parts", tmp_path / "out")
    assert code == 0
    assert "(Parquet, 2 files, 30 records)" in out
    assert [pickle.loads(r) for r in _read_back(str(tmp_path / "out"))] == rows


def test_a_directory_of_npy_files_one_array_each(capsys, tmp_path):
    (tmp_path / "arrays").mkdir()
    arrays = [np.arange(i + 1, dtype=np.float32).reshape(-1, 1) * i for i in range(12)]
    for i, array in enumerate(arrays):
        np.save(tmp_path / "arrays" / f"{i:03d}.npy", array)
    (tmp_path / "arrays" / "README.txt").write_text("not an array")
    code, out, _ = _convert(capsys, tmp_path / "arrays", tmp_path / "out", "--num-shards", "4")
    assert code == 0
    assert "(.npy files, 12 files, 12 records)" in out
    assert "np.load(io.BytesIO(b))" in out
    back = [np.load(io.BytesIO(r)) for r in _read_back(str(tmp_path / "out@4"))]
    assert len(back) == len(arrays)
    for got, want in zip(back, arrays, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_bad_npy_file_fails_with_1(capsys, tmp_path):
    (tmp_path / "arrays").mkdir()
    np.save(tmp_path / "arrays" / "0.npy", np.arange(3))
    np.save(tmp_path / "arrays" / "1.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    code, _, err = _convert(capsys, tmp_path / "arrays", tmp_path / "out")
    assert code == 1
    assert "1.npy is not a numeric .npy array" in err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def hf_dataset(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    rows = {"x": list(range(25)), "text": [f"t{i}" for i in range(25)], "blob": [b"ab"] * 25}
    dataset = datasets.Dataset.from_dict(rows)
    dataset.save_to_disk(str(tmp_path / "hf"))
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(tmp_path / "hfdd"))
    capsys.readouterr()  # datasets' own progress bars
    return [dict(zip(rows, values, strict=True)) for values in zip(*rows.values(), strict=True)]


@pytest.mark.timeout(120)  # datasets may start threads
def test_a_huggingface_dataset_saved_to_disk(capsys, tmp_path, hf_dataset):
    code, out, err = _convert(capsys, tmp_path / "hf", tmp_path / "out", "--num-shards", "2")
    assert code == 0, err
    assert "(HuggingFace dataset, saved with save_to_disk, 25 records)" in out
    assert [pickle.loads(r) for r in _read_back(str(tmp_path / "out@2"))] == hf_dataset


@pytest.mark.timeout(120)
def test_a_huggingface_dataset_dict_asks_for_one_split(capsys, tmp_path, hf_dataset):
    code, _, err = _convert(capsys, tmp_path / "hfdd", tmp_path / "out")
    assert code == 2
    assert "holds a HuggingFace DatasetDict (splits: test, train)" in err
    assert f"e.g. {tmp_path / 'hfdd' / 'test'}" in err


def test_a_missing_input_is_one_line_and_exit_2(capsys, tmp_path):
    missing = tmp_path / "missing.jsonl"
    code, out, err = _convert(capsys, missing, tmp_path / "out")
    assert code == 2
    assert out == ""
    assert err == f"grain convert: error: no such file or directory: {missing}\n"


@pytest.mark.timeout(60)
def test_the_console_script_exits_2_on_a_missing_input(tmp_path):
    missing = tmp_path / "missing.parquet"
    result = subprocess.run(
        [sys.executable, "-m", "grain._cli", "convert", str(missing), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"grain convert: error: no such file or directory: {missing}"
    ]


@pytest.mark.parametrize(
    ("make", "src", "options", "message"),
    [
        (lambda p: (p / "data.csv").write_text("a,b\n"), "data.csv", [], "cannot tell the format"),
        (lambda p: (p / "d").mkdir(), "d", [], "holds no .jsonl, .json, .parquet, .tfrecord"),
        (lambda p: (p / "d").mkdir(), "d", ["--format", "hf"], "is not a dataset saved by"),
        (lambda p: (p / "a.json").write_text("1\n"), "a.json", ["--format", "npy"], "is a file"),
    ],
)
def test_inputs_it_cannot_read_exit_2(capsys, tmp_path, make, src, options, message):
    make(tmp_path)
    code, _, err = _convert(capsys, tmp_path / src, tmp_path / "out", *options)
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1


def test_a_directory_of_mixed_formats_asks_for_format(capsys, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    np.save(tmp_path / "d" / "b.npy", np.arange(2))
    code, _, err = _convert(capsys, tmp_path / "d", tmp_path / "out")
    assert code == 2
    assert "several formats (1 JSON lines, 1 .npy files): pass --format" in err
    code, out, _ = _convert(capsys, tmp_path / "d", tmp_path / "out", "--format", "jsonl")
    assert code == 0
    assert "2 records" in out


def test_an_existing_output_needs_overwrite(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n')
    assert _convert(capsys, tmp_path / "a.jsonl", tmp_path / "out")[0] == 0
    code, _, err = _convert(capsys, tmp_path / "a.jsonl", tmp_path / "out")
    assert code == 2
    assert (
        err == f"grain convert: error: {tmp_path / 'out'} already exists: pass --overwrite "
        "to replace it (or --resume to finish an interrupted conversion)\n"
    )
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    code, _, _ = _convert(capsys, tmp_path / "a.jsonl", tmp_path / "out", "--overwrite")
    assert code == 0
    assert len(_read_back(str(tmp_path / "out"))) == 2


def test_an_output_that_is_a_directory_exits_2(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n')
    code, _, err = _convert(capsys, tmp_path / "a.jsonl", tmp_path)
    assert code == 2
    assert "is a directory: pass a base name for the shards" in err


def test_a_line_that_is_not_json_fails_with_1_and_publishes_no_manifest(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": \n')
    code, _, err = _convert(capsys, tmp_path / "a.jsonl", tmp_path / "out", "--num-shards", "2")
    assert code == 1
    assert f"line 3 of {tmp_path / 'a.jsonl'} is not JSON" in err
    names = set(os.listdir(tmp_path))
    # Shard 0 (line 1) may have finished before shard 1 failed (then it is marked done), or
    # been stopped on the failure at any point: a stopped task leaves at most a temporary
    # file or a finished shard without its marker, both of which the next run replaces
    # (_convert_task's docstring). Nothing of shard 1's, and no manifest, is published.
    shard0 = {n for n in names if n.startswith("out-00000-of-00002")}
    assert shard0 <= {"out-00000-of-00002", "out-00000-of-00002.done"} | {
        n for n in shard0 if n.startswith("out-00000-of-00002.tmp-")
    }
    assert names - shard0 == {"a.jsonl", "out.plan.json"}
    if "out-00000-of-00002.done" in names:
        assert "out-00000-of-00002" in names


def test_the_summary_names_the_manifest_and_a_resume_keeps_every_shard(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(f"{i}\n" for i in range(10)))
    args = [tmp_path / "a.jsonl", tmp_path / "out", "--num-shards", "3", "--workers", "2"]
    code, out, _ = _convert(capsys, *args)
    assert code == 0
    assert f"manifest: {tmp_path / 'out.manifest.json'}" in out
    code, out, _ = _convert(capsys, *args, "--resume")
    assert code == 0
    assert "wrote 10 records (10 B) into 3 ArrayRecord shards (3 kept from an earlier run)" in out
    assert [json.loads(r) for r in _read_back(str(tmp_path / "out@3"))] == list(range(10))


def test_bad_arguments_exit_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as excinfo:
        main(["convert", "a.jsonl", "out", "--num-shards", "0"])
    assert excinfo.value.code == 2
    assert "--num-shards must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:
        main(["convert", "a.jsonl"])
    assert excinfo.value.code == 2
    with pytest.raises(SystemExit) as excinfo:
        main(["convert", "a.jsonl", "out", "--format", "csv"])
    assert excinfo.value.code == 2
    for options, message in [
        (["--resume", "--overwrite"], "pass one"),
        (["--ray-address", "auto"], "--ray-address needs --executor ray"),
        (["--workers", "0"], "--workers must be >= 1"),
    ]:
        with pytest.raises(SystemExit) as excinfo:
            main(["convert", "a.jsonl", "out", *options])
        assert excinfo.value.code == 2
        assert message in capsys.readouterr().err


def test_an_input_of_another_format_and_bad_writer_options_exit_2(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n')
    code, _, err = _convert(capsys, tmp_path / "a.jsonl", tmp_path / "out", "--format", "parquet")
    assert code == 2
    assert "a.jsonl is not a readable Parquet file" in err
    code, _, err = _convert(
        capsys, tmp_path / "a.jsonl", tmp_path / "out", "--writer-options", "group_size:x"
    )
    assert code == 2
    assert err.startswith("grain convert: error: --writer-options 'group_size:x': ")
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]


@pytest.mark.parametrize(
    ("size", "options"), [(10, "group_size:1,uncompressed"), (400, "group_size:1")]
)
def test_default_writer_options_fit_the_records_and_the_overhead_is_explained(
    capsys, tmp_path, size, options
):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps("x" * size) + "\n" for _ in range(3000)))
    code, out, _ = _convert(capsys, tmp_path / "a.jsonl", tmp_path / "out")
    assert code == 0
    assert f"writer options: {options}\n" in out
    on_disk = os.path.getsize(tmp_path / "out")
    records = 3000 * (size + 2)
    assert ("note: the files are" in out) == (on_disk > 1.5 * records), out
    if size == 10:  # 12-byte records take several times their size: the summary says why
        assert on_disk > 3 * records
        assert "every record is its own chunk" in out
    assert main(["inspect", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().out
    assert ("uncompressed" in shown) == (size == 10)


def test_writer_options_reach_the_files(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n')
    code, _, _ = _convert(
        capsys, tmp_path / "a.jsonl", tmp_path / "out", "--writer-options", "group_size:1,brotli:4"
    )
    assert code == 0
    assert main(["inspect", str(tmp_path / "out")]) == 0
    assert "compression: brotli level 4" in capsys.readouterr().out


def test_a_bucket_dest_is_refused_where_its_staging_cannot_work(capsys, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n')
    code, _, err = _convert(
        capsys, tmp_path / "a.jsonl", "s3://bkt/out", "--executor", "ray", "--ray-address", "auto"
    )
    assert code == 2
    assert "cannot write s3://bkt/out" in err
    assert "Convert to a DEST on storage every node shares" in err
    code, _, err = _convert(capsys, tmp_path / "a.jsonl", "s3://bkt/out", "--resume")
    assert code == 2
    assert "--resume needs the shards of the earlier run" in err
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]
