"""`grain bench`: the built-in pipelines, pipeline files, --json, and every error path."""

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

from grain._cli import main


def _bench(capsys, *args):
    code = main(["bench", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _pipeline_file(tmp_path, body, name="pipeline.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.timeout(60)  # reading threads
@pytest.mark.parametrize(
    ("builtin", "per_element"),
    [
        ("range-map-batch", "65.8 kB"),
        pytest.param(
            "arrayrecord-shuffle-batch",
            "65.5 kB",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("array_record") is None,
                reason="writes ArrayRecord files: array-record has no free-threaded wheel",
            ),
        ),
    ],
)
def test_in_process_builtins(capsys, builtin, per_element):
    code, out, err = _bench(capsys, "--builtin", builtin, "--num-elements", "20")
    assert code == 0, err
    assert out.startswith(f"grain bench: builtin:{builtin}, 20 elements\n")
    assert "start-up (iterator and first element)" in out
    assert "then 19 elements in" in out
    assert "elements/s" in out
    assert f"MB/s ({per_element} of arrays per element)" in out
    assert "bottleneck: stage" in out
    assert "BatchIterDataset(batch_size=64" in out
    assert err == ""


@pytest.mark.timeout(120)  # worker processes
def test_mp_images_json(capsys):
    code, out, _ = _bench(capsys, "--builtin", "mp-images", "--num-elements", "6", "--json")
    assert code == 0
    (line,) = out.splitlines()
    result = json.loads(line)
    assert result["pipeline"] == "builtin:mp-images"
    assert result["elements"] == 6
    assert result["timed_elements"] == 5
    assert result["bytes"] == 5 * (32 * 64 * 64 * 3 * 4 + 32 * 4)
    assert result["bytes_per_element"] == 32 * 64 * 64 * 3 * 4 + 32 * 4
    assert result["elements_per_s"] > 0
    assert result["mb_per_s"] > 0
    assert result["startup_s"] > 0
    assert result["ended_early"] is False
    assert result["bottleneck"].startswith("MultiprocessPrefetchIterDataset(num_workers=2")
    assert result["stages"][0]["elements"] == 5  # tracked from the second element on
    assert set(result["stages"][0]) == {"name", "elements", "self_ms", "share"}


@pytest.mark.timeout(120)  # worker processes started by the file's pipeline
def test_a_pipeline_file_with_worker_processes(capsys, tmp_path):
    path = _pipeline_file(
        tmp_path,
        """
        import numpy as np
        import grain

        def parse(x):
            return {"x": np.full(8, x, np.int64)}

        def make_dataset():
            ds = grain.MapDataset.range(400).shuffle(seed=0).map(parse).batch(10)
            options = grain.MultiprocessingOptions(num_workers=2)
            return ds.to_iter_dataset().mp_prefetch(options)
        """,
        name="my_pipeline.py",
    )
    code, out, err = _bench(capsys, path, "--num-elements", "30")
    assert code == 0, err
    assert f"grain bench: {path}, 30 elements" in out
    assert "(640 B of arrays per element)" in out
    assert "MultiprocessPrefetchIterDataset" in out
    assert "my_pipeline" not in sys.modules  # the import is undone
    assert str(tmp_path) not in sys.path


@pytest.mark.timeout(60)  # to_iter_dataset reads with threads
def test_a_map_dataset_that_ends_early(capsys, tmp_path):
    path = _pipeline_file(
        tmp_path,
        """
        import grain

        def make_dataset():
            return grain.MapDataset.range(5)
        """,
    )
    code, out, _ = _bench(capsys, path, "--num-elements", "10")
    assert code == 0
    assert "the pipeline ended after 5 elements" in out
    code, out, _ = _bench(capsys, path, "--num-elements", "10", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["elements"] == 5
    assert result["ended_early"] is True
    assert result["bytes"] == 0  # Python ints, no arrays


@pytest.mark.timeout(60)
def test_one_element(capsys, tmp_path):
    path = _pipeline_file(
        tmp_path, "import grain\nmake_dataset = lambda: grain.MapDataset.range(3)"
    )
    code, out, _ = _bench(capsys, path, "--num-elements", "1")
    assert code == 0
    assert "  1 elements in" in out


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def make_dataset():\n    return [1, 2]\n", "make_dataset() returned list, not a"),
        ("raise ImportError('needs a module')\n", "importing {path} raised ImportError: needs"),
        ("def make_dataset(:\n", "importing {path} raised SyntaxError"),
        ("def make_dataset():\n    return 1 / 0\n", "make_dataset() raised ZeroDivisionError"),
        (
            "import grain\ndef boom(x):\n    raise ValueError(f'bad {x}')\n"
            "def make_dataset():\n    return grain.MapDataset.range(3).map(boom)\n",
            "the pipeline raised ValueError at element 0: bad 0",
        ),
        (
            "import grain\ndef make_dataset():\n    return grain.MapDataset.range(0)\n",
            "the pipeline produced no element: nothing to measure",
        ),
    ],
)
@pytest.mark.timeout(60)
def test_runtime_failures_exit_1(capsys, tmp_path, body, message):
    path = _pipeline_file(tmp_path, body)
    code, _, err = _bench(capsys, path, "--num-elements", "3")
    assert code == 1
    assert err.splitlines()[-1].startswith("grain bench: error: " + message.format(path=path))


def test_a_file_without_make_dataset_exits_2(capsys, tmp_path):
    path = _pipeline_file(tmp_path, "x = 1\n")
    code, _, err = _bench(capsys, path)
    assert code == 2
    assert err == (
        f"grain bench: error: {path} defines no make_dataset() function: define one returning "
        "a grain.MapDataset or grain.IterDataset\n"
    )


def test_missing_and_unusable_paths_exit_2(capsys, tmp_path):
    missing = tmp_path / "missing.py"
    assert _bench(capsys, missing) == (2, "", f"grain bench: error: no such file: {missing}\n")
    code, _, err = _bench(capsys, tmp_path)
    assert code == 2
    assert "is a directory" in err
    (tmp_path / "pipeline.txt").write_text("def make_dataset(): pass\n")
    code, _, err = _bench(capsys, tmp_path / "pipeline.txt")
    assert code == 2
    assert "is not a Python file (name it *.py)" in err


@pytest.mark.timeout(60)
def test_the_console_script_exits_2_on_a_missing_file(tmp_path):
    missing = tmp_path / "missing.py"
    result = subprocess.run(
        [sys.executable, "-m", "grain._cli", "bench", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == f"grain bench: error: no such file: {missing}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a PIPELINE_FILE or --builtin NAME (one of: range-map-batch"),
        (["p.py", "--builtin", "mp-images"], "(not both)"),
        (["--builtin", "no-such"], "invalid choice: 'no-such'"),
        (["--builtin", "mp-images", "--num-elements", "0"], "--num-elements must be >= 1"),
        (["--builtin", "mp-images", "--num-elements", "x"], "invalid int value: 'x'"),
    ],
)
def test_bad_arguments_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as excinfo:
        main(["bench", *args])
    assert excinfo.value.code == 2
    assert message in capsys.readouterr().err
