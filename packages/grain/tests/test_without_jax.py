"""`import grain` without the `jax` extra: every namespace imports, the JAX names
stay in their places and raise an ImportError naming `pip install "grainline[jax]"`.

The workspace has jax installed, so each test runs a child interpreter in which
grain_jax, jax and orbax cannot be found (a meta-path finder that refuses them,
as an environment without them would). integration_tests/test_wheels.py checks
the same on a real `pip install grainline` from the wheels.
"""

import json
import subprocess
import sys

import pytest

_WITHOUT_JAX = """
import importlib.abc, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"grain_jax", "jax", "jaxlib", "orbax"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""

_PROBE = """
import json, sys
import grain
import grain.python as pg
import grain.python.experimental

def error_of(statement):
    try:
        exec(statement, {})
    except ImportError as error:
        return str(error)
    return None

names = [
    "from grain.experimental import device_put",
    "grain.experimental.make_global_batch",
    "grain.python.experimental.device_put",
    "grain.checkpoint.CheckpointSave",
    "grain.sharding.ShardByJaxProcess",
    "grain.python.ShardByJaxProcess",
    "grain.python.PyGrainCheckpointHandler",
    "from grain.python import GrainCheckpointRestore",
]
ds = grain.MapDataset.range(10).shuffle(seed=1).map(lambda x: x * 2).batch(5)
print(json.dumps({
    "errors": {name: error_of("import grain, grain.python, grain.python.experimental\\n" + name)
               for name in names},
    "batches": [b.tolist() for b in ds.to_iter_dataset()],
    "dir": "device_put" in dir(grain.experimental) and "ShardByJaxProcess" in dir(pg),
    "loaded": sorted(m for m in sys.modules if m.partition(".")[0] in {"grain_jax", "jax"}),
}))
"""


def _stdout(code):
    """What a child interpreter running `code` printed; it must exit with 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _run(code):
    return json.loads(_stdout(code).splitlines()[-1])


@pytest.mark.timeout(180)
def test_jax_names_say_how_to_install_them():
    report = _run(_WITHOUT_JAX + _PROBE)
    for name, error in report["errors"].items():
        assert error is not None, f"{name} did not raise ImportError without jax"
        assert 'pip install "grainline[jax]"' in error, (name, error)
        assert "grain_jax" in error, (name, error)
    assert sorted(x for b in report["batches"] for x in b) == list(range(0, 20, 2))
    assert report["dir"]
    assert report["loaded"] == []


@pytest.mark.timeout(180)
def test_with_jax_the_same_names_resolve():
    pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint has no free-threaded wheel")
    report = _run(_PROBE)
    assert report["errors"] == dict.fromkeys(report["errors"])
    assert "grain_jax" in report["loaded"]


@pytest.mark.timeout(180)
def test_a_broken_jax_install_is_not_disguised_as_a_missing_extra():
    # orbax is there but one of its own dependencies is not: that error, unchanged.
    pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint has no free-threaded wheel")
    code = _WITHOUT_JAX.replace('{"grain_jax", "jax", "jaxlib", "orbax"}', '{"tensorstore"}') + (
        "import grain\n"
        "try:\n"
        "    grain.checkpoint.CheckpointSave\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, 'grainline[jax]' in str(error))\n"
    )
    assert _stdout(code).split() == ["tensorstore", "False"]


def test_without_orbax_the_handler_names_its_extra():
    # As on free-threaded CPython: jax installs, orbax-checkpoint (tensorstore) does not.
    code = _WITHOUT_JAX.replace('{"grain_jax", "jax", "jaxlib", "orbax"}', '{"orbax"}') + (
        "import grain\n"
        "try:\n"
        "    grain.checkpoint.CheckpointSave\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, 'grain-jax[orbax]' in str(error))\n"
    )
    assert _stdout(code).split() == ["ImportError", "True"]
