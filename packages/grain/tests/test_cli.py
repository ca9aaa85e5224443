"""The `grain` command: the demo runs its checks and exit codes are reliable."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import grain
from grain import _cli_demo, _cli_inspect
from grain._cli import main
from grain._cli_common import format_bytes, tree_nbytes

needs_array_record = pytest.mark.skipif(
    importlib.util.find_spec("array_record") is None,
    reason="the demo writes ArrayRecord files: array-record has no free-threaded wheel",
)


@needs_array_record
@pytest.mark.timeout(120)  # it starts worker processes and device_put threads
def test_demo_runs_and_passes_its_checks(capsys):
    assert main(["demo", "--num-records", "5000"]) == 0
    out = capsys.readouterr().out
    assert "ArrayRecord shards" in out
    assert "mp_prefetch, 2 worker processes -> device_put onto" in out
    assert "with 2 worker processes" in out
    assert "MB/s" in out
    assert "Orbax step 52" in out  # 156 batches, checkpoint after a third of them
    assert "bottleneck: stage" in out
    # Waiting on the workers is their work, with a share, not "wait".
    (workers_row,) = [line for line in out.splitlines() if "  MultiprocessPrefetch" in line]
    assert "%" in workers_row.split("us", 1)[1]
    # Faster with workers, or one line saying why not here.
    assert ("2 workers read" in out) != ("2 workers are slower here" in out)
    assert "saving the checkpoint" in out
    assert "the remaining 104 batches are identical: True" in out
    assert out.count("same batches as with 2 workers: True") == 2
    assert "epoch 0 shards are disjoint: True" in out
    assert "all checks passed" in out
    assert "M/s" in out
    assert "k records/s" in out


@needs_array_record
@pytest.mark.timeout(120)  # worker processes
@pytest.mark.parametrize("missing", ["jax", "orbax"])
def test_demo_works_without_jax_or_orbax(capsys, monkeypatch, missing):
    monkeypatch.setattr(_cli_demo, f"_load_{missing}", lambda: None)
    assert main(["demo", "--num-records", "640"]) == 0
    out = capsys.readouterr().out
    assert "checkpoints: JSON" in out
    assert "JSON file data-6.json" in out
    if missing == "jax":
        assert "jax does not import here" in out
        assert "device_put" not in out
    else:
        assert "device_put onto" in out
    assert "the remaining 14 batches are identical: True" in out
    assert "all checks passed" in out


@pytest.mark.timeout(120)  # worker processes
def test_the_workers_verdict_says_why_when_they_are_slower():
    faster = _cli_demo._workers_verdict(40_000, 20_000)
    assert faster == (
        "2 workers read 2.0x as fast as this process alone "
        "(40.0 k records/s against 20.0 k records/s)"
    )
    slower = _cli_demo._workers_verdict(10_000, 50_000)
    assert slower.startswith("2 workers are slower here (10.0 k records/s against 50.0 k")
    assert "a record takes 20 us" in slower
    assert "\n" not in slower


@needs_array_record
def test_demo_exits_1_when_a_check_fails(capsys, monkeypatch):
    monkeypatch.setattr(_cli_demo, "_load_jax", lambda: None)
    # A restore that restores nothing: the "continuation" starts from the beginning.
    monkeypatch.setattr(_cli_demo._JsonCheckpoints, "restore", lambda self, it, step: None)
    assert main(["demo", "--num-records", "640"]) == 1
    out = capsys.readouterr().out
    assert "batches are identical: False" in out
    assert "A CHECK FAILED" in out


def test_bad_arguments_exit_with_2(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["demo", "--num-records", "10"])
    assert excinfo.value.code == 2
    assert "--num-records" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:
        main(["no-such-command"])
    assert excinfo.value.code == 2
    with pytest.raises(SystemExit) as excinfo:
        main([])
    assert excinfo.value.code == 2


@pytest.mark.parametrize("command", ["demo", "convert", "inspect", "bench"])
def test_every_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as excinfo:
        main([command, "--help"])
    assert excinfo.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: grain {command}" in out
    assert len(out.splitlines()) > 10


def test_version_and_an_unknown_option_shows_its_commands_usage(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["--version"])
    assert excinfo.value.code == 0
    assert capsys.readouterr().out == f"grain {grain.__version__}\n"
    with pytest.raises(SystemExit) as excinfo:
        main(["inspect", "x.array_record", "--bogus"])
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: grain inspect ")
    assert err.splitlines()[-1] == "grain inspect: error: unrecognized arguments: --bogus"


def test_interrupt_exits_130_and_an_unforeseen_error_exits_1(capsys, monkeypatch, tmp_path):
    def interrupted(args):
        raise KeyboardInterrupt

    def broken(args):
        raise RuntimeError("something unforeseen")

    monkeypatch.setattr(_cli_inspect, "run", interrupted)
    assert main(["inspect", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip() == "grain inspect: interrupted"
    monkeypatch.setattr(_cli_inspect, "run", broken)
    assert main(["inspect", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.splitlines()[-1] == "grain inspect: error: RuntimeError: something unforeseen"


@pytest.mark.timeout(120)
def test_console_script_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "grain._cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    for command in ("demo", "convert", "inspect", "bench"):
        assert command in result.stdout
    assert "exit codes" in result.stdout
    assert "130  interrupted" in result.stdout


def test_number_formats():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1500) == "1.5 kB"
    assert format_bytes(12_300_000) == "12.3 MB"
    tree = {"a": np.zeros(4, np.float32), "b": [np.int64(1), (np.zeros(2, np.uint8),)], "c": 3}
    assert tree_nbytes(tree) == 16 + 8 + 2
