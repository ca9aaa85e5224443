"""Each layer installs from the wheels on its own, as a user installs it.

`uv build --all-packages` builds the seven wheels once per session. pip is the one
that ships with Python's ensurepip, run from its wheel. For each layer, a fresh
virtual environment gets:

- `grainline` (the face, `import grain`): exactly what a user types,
  `pip install --find-links WHEELS grainline`, with the registry visible. That
  is the point: `--find-links` adds our wheels to the registry's candidates, and
  under the name `grain` the registry's Google Grain 0.2.18 (the higher version)
  won over our 0.1.0. The script then checks that what got installed is ours:
  the `grainline` distribution, whose recorded `grain/__init__.py` is the file
  `import grain` runs, no distribution named `grain`, and the `grain` command.
  Its third-party dependencies come from the registry, as a user's do.
- `grainline[jax]` and the six layers: first their third-party dependencies,
  exactly the versions of uv.lock (`uv export --package LAYER
  --no-emit-workspace --format pylock.toml`), installed by
  `uv pip install --offline` from the files `uv sync` put in uv's cache (jax and
  friends are 600 MB: no download); then the layer with pip. `grainline[jax]`
  resolves with the registry visible, like `grainline`; the six layers install
  with `--no-index` (see `_pip_install`).

Then a script in that environment, run outside the checkout, checks that exactly
the layer and the grain packages below it are installed, from wheels (no
editable install, no path into the checkout), and runs a pipeline of that layer.
`grainline` without its extra has no jax, runs the basic tutorial and names the
extra where a JAX name is used; `grainline[jax]` adds device_put.

The tests of `grainline` need the registry (pypi.org or the index pip is
configured with); the others run offline after `uv sync --locked --all-packages`.
`test_google_grain_beside_grainline` installs Google's `grain` wheel beside ours,
in both orders, and checks the warning and the documented fix.
"""

import email
import ensurepip
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    "grain-index",
    "grain-sources",
    "grain-dataset",
    "grain-mp",
    "grain-convert",
    "grain-jax",
    "grainline",
]
# The face is published as `grainline` (Google's Grain owns `grain` on the registry).
FACE = "grainline"
GOOGLE_GRAIN = "grain==0.2.18"

# The grain distributions each installation must hold, exactly.
CLOSURE = {
    "grain-index": {"grain-index"},
    "grain-sources": {"grain-sources"},
    "grain-sources[arrayrecord]": {"grain-sources"},
    "grain-dataset": {"grain-index", "grain-sources", "grain-dataset"},
    "grain-mp": {"grain-index", "grain-sources", "grain-dataset", "grain-mp"},
    "grain-convert": {"grain-index", "grain-sources", "grain-dataset", "grain-mp", "grain-convert"},
    "grain-jax": {"grain-index", "grain-sources", "grain-dataset", "grain-jax"},
    "grainline": {
        "grain-index",
        "grain-sources",
        "grain-dataset",
        "grain-mp",
        "grain-convert",
        "grainline",
    },
    "grainline[jax]": set(LAYERS),
}

# Shared by every check script: what is installed, and from where.
_INSTALLED = """
import importlib.metadata, json, pathlib, sys
root, expected = pathlib.Path(sys.argv[1]), set(json.loads(sys.argv[2]))
dists = list(importlib.metadata.distributions())
names = {d.metadata["Name"].replace("_", "-") for d in dists}
grain = {name for name in names if name.startswith("grain")}
assert grain == expected, f"grain distributions: {sorted(grain)}, expected {sorted(expected)}"
for dist in dists:
    direct = dist.read_text("direct_url.json") or ""
    assert "editable" not in direct and str(root) not in direct, (dist.metadata["Name"], direct)
for pth in pathlib.Path(sys.prefix).rglob("*.pth"):
    assert str(root) not in pth.read_text(), f"{pth} points into the checkout"
for name in sorted(grain):
    module = __import__({"grainline": "grain"}.get(name, name.replace("-", "_")))
    assert pathlib.Path(sys.prefix) in pathlib.Path(module.__file__).parents, module.__file__
"""

# Whether `import grain` runs grainline's files: the file it runs is the one grainline's
# RECORD lists, with the recorded hash (a `grain` installed over ours keeps the path and
# replaces the content). Prints one JSON line; does not import grain itself.
_WHO_OWNS_GRAIN = """
import base64, hashlib, importlib.metadata, importlib.util, json, pathlib
def owner():
    init = pathlib.Path(importlib.util.find_spec("grain").origin).resolve()
    digest = hashlib.sha256(init.read_bytes()).digest()
    digest = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    try:
        ours = importlib.metadata.distribution("grainline")
    except importlib.metadata.PackageNotFoundError:
        return {"ours": False, "why": "no grainline distribution"}
    recorded = [
        f for f in ours.files or [] if pathlib.Path(ours.locate_file(f)).resolve() == init
    ]
    if not recorded:
        return {"ours": False, "why": f"{init} is not a file of grainline"}
    if recorded[0].hash.value != digest:
        return {"ours": False, "why": f"{init} is not the file grainline installed"}
    try:
        other = importlib.metadata.distribution("grain").version
    except importlib.metadata.PackageNotFoundError:
        other = None
    return {"ours": True, "version": ours.version, "google_grain": other}
"""

# Appended to the face's checks: what got installed is ours, and only ours.
_OURS = """
found = owner()
assert found == {"ours": True, "version": "0.1.0", "google_grain": None}, found
"""

# A pipeline of each layer, run in its environment.
_PIPELINES = {
    "grain-index": """
import numpy as np, grain_index
order = grain_index.index_shuffle_array(np.arange(1000), 999, seed=7)
assert sorted(order.tolist()) == list(range(1000)) and order.tolist() != list(range(1000))
sampler = grain_index.IndexSampler(10, grain_index.NoSharding(), shuffle=True, num_epochs=2, seed=1)
keys = [m.record_key for m in sampler]
assert sorted(keys[:10]) == sorted(keys[10:]) == list(range(10)), keys
loaded = sorted(m for m in sys.modules if m.startswith("grain") and not m.startswith("grain_index"))
assert not loaded, loaded
""",
    # Without its `arrayrecord` extra (as on free-threaded CPython, where array-record has
    # no wheel): the package imports, and ArrayRecord names the extras to install.
    "grain-sources": """
import grain_sources
fixture = root / "packages" / "grain-sources" / "tests" / "data" / "small.array_record"
for call in (
    lambda: grain_sources.write_array_record([b"a"], "r.array_record"),
    lambda: grain_sources.ArrayRecordDataSource(str(fixture)),
):
    try:
        call()
    except ImportError as error:
        assert "grain-sources[arrayrecord]" in str(error), error
    else:
        raise AssertionError("ArrayRecord worked without array-record or fsspec")
""",
    "grain-sources[arrayrecord]": """
import tempfile, grain_sources
with tempfile.TemporaryDirectory() as tmp:
    grain_sources.write_array_record([b"a", b"bb", b"ccc"], tmp + "/r.array_record")
    source = grain_sources.ArrayRecordDataSource(tmp + "/r.array_record")
    assert [source[i] for i in range(len(source))] == [b"a", b"bb", b"ccc"]
""",
    "grain-dataset": """
import grain_dataset
ds = grain_dataset.MapDataset.range(100).seed(3).shuffle().map(lambda x: x * 2).batch(10)
it = iter(ds.to_iter_dataset(grain_dataset.ReadOptions(num_threads=2)))
first = next(it)
state = it.get_state()
rest = [b.tolist() for b in it]
again = iter(ds.to_iter_dataset())
again.set_state(state)
assert [b.tolist() for b in again] == rest
assert sorted(first.tolist() + sum(rest, [])) == list(range(0, 200, 2))
""",
    "grain-mp": """
import grain_dataset, grain_mp
if __name__ == "__main__":
    ds = grain_dataset.MapDataset.range(64).seed(5).shuffle().map(lambda x: x + 1)
    options = grain_mp.MultiprocessingOptions(num_workers=2)
    got = list(grain_mp.mp_prefetch(ds.to_iter_dataset(), options))
    assert sorted(got) == list(range(1, 65)), got
""",
    # The engine without the face: JSON lines into shards on worker processes (which
    # import the main module, hence the guard); Ray is an extra, and its absence is named.
    "grain-convert": """
import json, tempfile, grain_convert, grain_sources
if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        with open(tmp + "/rows.jsonl", "w") as file:
            file.writelines(json.dumps({"id": i}) + "\\n" for i in range(50))
        result = grain_convert.convert(tmp + "/rows.jsonl", tmp + "/out/x", num_shards=3, workers=2)
        with grain_sources.ArrayRecordDataSource(result.pattern) as source:
            assert [json.loads(source[i])["id"] for i in range(len(source))] == list(range(50))
        assert grain_convert.manifest.check(result.manifest_path) == []
        try:
            grain_convert.convert(tmp + "/rows.jsonl", tmp + "/ray/x", executor="ray")
        except grain_convert.ConversionError as error:
            assert "grain-convert[ray]" in str(error), error
        else:
            raise AssertionError("the ray executor ran without ray installed")
""",
    "grain-jax": """
import os
import grain_dataset, grain_jax, jax, numpy as np
ds = grain_dataset.MapDataset.range(40).map(lambda x: np.full((2,), x)).batch(4)
out = list(grain_jax.device_put(ds.to_iter_dataset(), jax.devices("cpu")[0]))
assert all(isinstance(b, jax.Array) for b in out)
assert sorted(np.concatenate([np.asarray(b)[:, 0] for b in out]).tolist()) == list(range(40))
""",
    "grainline": _WHO_OWNS_GRAIN
    + _OURS
    + """
import runpy, subprocess
try:
    import jax  # noqa: F401
except ImportError:
    pass
else:
    raise AssertionError("jax is installed with plain `grainline`")
import grain, grain.convert, grain_convert
assert grain.convert.convert is grain_convert.convert
try:
    grain.experimental.device_put
except ImportError as error:
    assert 'pip install "grainline[jax]"' in str(error), error
else:
    raise AssertionError("grain.experimental.device_put resolved without jax")
runpy.run_path(sys.argv[3], run_name="__main__")  # the basic tutorial
version = subprocess.run(
    [pathlib.Path(sys.executable).parent / "grain", "--version"],
    capture_output=True, text=True, check=True,
)
assert "0.1.0" in version.stdout, version
""",
    "grainline[jax]": _WHO_OWNS_GRAIN
    + _OURS
    + """
import grain, jax, numpy as np
ds = grain.MapDataset.range(8).batch(4).to_iter_dataset()
out = list(grain.experimental.device_put(ds, jax.devices("cpu")[0]))
assert [np.asarray(b).tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7]]
assert grain.checkpoint.CheckpointSave is not None
""",
}


def _uv():
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv builds the wheels: run the tests with `uv run pytest`"
    return uv


def _clean_env():
    # Nothing of the workspace's environment may leak into the fresh one.
    dropped = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, "UV_PYTHON_DOWNLOADS": "never", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _run(command, cwd, timeout=300):
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"failed (rc={done.returncode}): {' '.join(map(str, command))}\n"
        f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    )
    return done


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheels")
    _run([_uv(), "build", "--all-packages", "--wheel", "--offline", "--out-dir", out], ROOT)
    return out


def _bundled_pip():
    bundled = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    assert bundled, "this Python ships without ensurepip's pip wheel"
    return bundled[-1] / "pip"  # a wheel of pip runs as a zip application


def test_every_sibling_requirement_is_a_compatible_range(wheels):
    found = sorted(wheels.glob("*.whl"))
    assert [w.name.split("-")[0] for w in found] == sorted(n.replace("-", "_") for n in LAYERS)
    for wheel in found:
        with zipfile.ZipFile(wheel) as archive:
            (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = email.message_from_bytes(archive.read(name))
        for requirement in metadata.get_all("Requires-Dist") or []:
            if requirement.startswith("grain"):
                assert ">=0.1,<0.2" in requirement.replace(" ", ""), (wheel.name, requirement)


def _venv(tmp_path):
    venv = tmp_path / "venv"
    _run([_uv(), "venv", "--python", sys.executable, venv], tmp_path)
    return venv / "bin" / "python"


def _pip_install(python, wheels, requirement, cwd, *options):
    """`pip install --find-links WHEELS REQUIREMENT`, with the registry visible.

    Only the six layers may add `--no-index`: the registry has no distribution
    of their names (`pip index versions grain-index` ... finds none), so hiding it
    hides nothing, and a missing or wrong dependency is an install error instead
    of a download. The face, `grainline`, never does: the registry is what a
    user's pip sees, and under our former name `grain` it is what picked Google's
    Grain over our wheel.
    """
    pip = [python, _bundled_pip(), "install", *options, "--find-links", wheels, requirement]
    return _run(pip, cwd)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("layer", [*LAYERS, "grain-sources[arrayrecord]", "grainline[jax]"])
def test_layer_installs_from_wheels_and_runs_a_pipeline(layer, wheels, tmp_path):
    project, _, extra = layer.partition("[")
    python = _venv(tmp_path)

    if layer != FACE:  # the plain face takes its dependencies from the registry, as a user
        pylock = tmp_path / "pylock.toml"
        export = [_uv(), "export", "--frozen", "--no-dev", "--no-emit-workspace"]
        export += ["--package", project, "--format", "pylock.toml", "-o", pylock, "-q"]
        if extra:
            export += ["--extra", extra.rstrip("]")]
        _run(export, ROOT)
        third_party = [_uv(), "pip", "install", "--python", python, "--offline", "-r", pylock]
        _run(third_party, tmp_path)

    options = () if project == FACE else ("--no-index",)
    _pip_install(python, wheels, layer, tmp_path, *options)

    script = tmp_path / "check.py"
    script.write_text(_INSTALLED + _PIPELINES[layer])
    tutorial = ROOT / "docs" / "tutorials" / "dataset_basics.py"
    expected = json.dumps(sorted(CLOSURE[layer]))
    _run([python, script, ROOT, expected, tutorial], tmp_path)


def _python(python, code, cwd, *options):
    """Runs `python OPTIONS -c CODE` in the venv; returns the CompletedProcess, any status."""
    return subprocess.run(
        [str(python), *options, "-c", code],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _owner(python, cwd):
    done = _python(python, _WHO_OWNS_GRAIN + "print(json.dumps(owner()))", cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_google_grain_beside_grainline(wheels, tmp_path):
    """Both orders of installing Google's `grain` and ours, and the documented fix.

    Google's wheel goes in with `--no-deps` (its files are what matter, and its
    dependencies would add minutes); pip overwrites the files both ship, as it
    does for users.
    """
    python = _venv(tmp_path)
    warning = "GrainDistributionConflictWarning"
    use = "import grain, grain.python, grain.experimental\n"
    use += "print(list(grain.MapDataset.range(4).map(lambda x: x * 3)))"

    # Google's first, then ours (the usual way in): our files win; import grain warns once.
    _pip_install(python, wheels, GOOGLE_GRAIN, tmp_path, "--no-deps")
    _pip_install(python, wheels, FACE, tmp_path)
    assert _owner(python, tmp_path) == {"ours": True, "version": "0.1.0", "google_grain": "0.2.18"}
    done = _python(python, use, tmp_path, "-W", "always")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 3, 6, 9]", done.stdout
    assert done.stderr.count(warning) == 1, done.stderr
    for part in ("'grainline' 0.1.0", "'grain' 0.2.18", "pip uninstall -y grain grainline"):
        assert part in done.stderr, (part, done.stderr)

    # Ours, then Google's over it: its grain/__init__.py replaces ours, so import grain
    # runs Google's code (here failing on its missing dependencies) and none of ours runs
    # to warn; the docs say so and name the same fix.
    _pip_install(python, wheels, GOOGLE_GRAIN, tmp_path, "--no-deps", "--force-reinstall")
    found = _owner(python, tmp_path)
    assert found["ours"] is False, found
    assert "not the file grainline installed" in found["why"], found
    assert warning not in _python(python, use, tmp_path, "-W", "always").stderr

    # The fix the warning and the docs give: uninstall both, install ours.
    uninstall = [python, _bundled_pip(), "uninstall", "-y", "grain", FACE]
    _run(uninstall, tmp_path)
    _pip_install(python, wheels, FACE, tmp_path)
    assert _owner(python, tmp_path) == {"ours": True, "version": "0.1.0", "google_grain": None}
    done = _python(python, use, tmp_path, "-W", "error")  # no warning left, none raised
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 3, 6, 9]", done.stdout
