"""The distribution name `grainline`, and the warning when Google's `grain` is installed too.

Google's Grain is the distribution `grain`. Here it is described by a real
dist-info directory on the import path (what pip writes, minus the files), which
`importlib.metadata` finds like any installed distribution; the wheel test
(integration_tests/test_wheels.py) installs Google's actual wheel beside ours.
"""

import importlib.metadata
import os
import subprocess
import sys
import warnings

import pytest

import grain
from grain import _distribution


def _fake_google_grain(directory, version="0.2.18"):
    info = directory / f"grain-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: grain\nVersion: {version}\n")
    return directory


def _python(tmp_path, extra_path, code="import grain", warnings_option="always"):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if extra_path:
        env["PYTHONPATH"] = str(extra_path)
    return subprocess.run(
        [sys.executable, "-W", warnings_option, "-c", code],
        cwd=tmp_path,  # not the checkout: only what is installed is importable
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_distribution_is_grainline_and_gives_the_version():
    assert _distribution.DISTRIBUTION == "grainline"
    assert grain.__version__ == importlib.metadata.version("grainline")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("grain")  # the workspace holds no Google grain


def test_no_warning_without_google_grain():
    assert _distribution._conflicting_version() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _distribution._warn_if_conflicting("0.1.0")


def test_google_grain_beside_us_is_found_and_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(_fake_google_grain(tmp_path, "0.2.18")))
    assert _distribution._conflicting_version() == "0.2.18"
    with pytest.warns(grain.GrainDistributionConflictWarning) as caught:
        _distribution._warn_if_conflicting("0.1.0")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "'grainline' 0.1.0" in message, message
    assert "'grain' 0.2.18" in message, message
    assert "pip uninstall -y grain grainline && pip install grainline" in message, message
    assert issubclass(grain.GrainDistributionConflictWarning, UserWarning)


@pytest.mark.timeout(120)
def test_import_grain_warns_once_when_google_grain_is_installed(tmp_path):
    fake = _fake_google_grain(tmp_path / "site")
    code = "import grain, grain.python, grain.experimental, grain.sources"
    done = _python(tmp_path, fake, code)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("GrainDistributionConflictWarning") == 1, done.stderr
    assert "'grain' 0.2.18" in done.stderr, done.stderr
    assert "grain/__init__.py" in done.stderr, done.stderr  # one location, filterable


@pytest.mark.timeout(120)
def test_import_grain_is_silent_without_google_grain(tmp_path):
    done = _python(tmp_path, None)
    assert done.returncode == 0, done.stderr
    assert "GrainDistributionConflictWarning" not in done.stderr, done.stderr


@pytest.mark.timeout(120)
def test_the_warning_is_an_error_where_warnings_are_errors(tmp_path):
    # A user's test suite with filterwarnings=error fails at `import grain`, loudly.
    fake = _fake_google_grain(tmp_path / "site")
    done = _python(tmp_path, fake, warnings_option="error::UserWarning")
    assert done.returncode != 0
    assert "GrainDistributionConflictWarning" in done.stderr, done.stderr
