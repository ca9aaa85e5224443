"""The `grain` command: the demo runs its checks and exit codes are reliable."""

import subprocess
import sys

import pytest

from grain._cli import main


@pytest.mark.timeout(120)  # it starts worker processes
def test_demo_runs_and_passes_its_checks(capsys):
    assert main(["demo", "--num-records", "5000"]) == 0
    out = capsys.readouterr().out
    assert "next 20 batches identical: True" in out
    assert "the same with threads and 2 workers: True" in out
    assert "2 worker processes" in out
    assert "ArrayRecord shards" in out
    assert "all checks passed" in out
    assert "M/s" in out
    assert "k/s" in out or out.count("M/s") >= 3


def test_bad_arguments_exit_with_2(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["demo", "--num-records", "10"])
    assert excinfo.value.code == 2
    assert "--num-records" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:
        main(["no-such-command"])
    assert excinfo.value.code == 2


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
    assert "demo" in result.stdout
