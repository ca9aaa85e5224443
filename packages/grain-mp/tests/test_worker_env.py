"""Worker processes start with the accelerators hidden, unless the user opts out.

Each test looks at the environment from inside real worker processes (a map
that returns what the worker sees), for every start method, through
mp_prefetch and the DataLoader. The parent's environment names devices that
the workers must not see, so that a test on a machine without a GPU still
shows what would hide one; with jax installed, a worker that imports it
finds only CPU devices.
"""

import importlib.util
import multiprocessing
import os
import sys

import pytest

from grain_dataset import MapDataset, MapTransform
from grain_index import IndexSampler, NoSharding
from grain_mp import DataLoader, MultiprocessingOptions, worker_env

pytestmark = pytest.mark.timeout(120)

VARIABLES = ("JAX_PLATFORMS", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
HIDDEN = ("cpu", "", "")
# What a trainer on one GPU might have set: it is the trainer's, not the workers'.
PARENT = {"JAX_PLATFORMS": "cuda", "CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}
METHODS = ["fork", "forkserver", "spawn"]


def _functions():
    """The maps the workers run, defined here so that they travel by value to workers
    that do not fork (this test module is not importable there)."""

    def environment(_):
        return tuple(os.environ.get(name) for name in VARIABLES)

    def jax_in_worker(_):
        import jax

        return jax.config.jax_platforms, sorted({device.platform for device in jax.devices()})

    return environment, jax_in_worker


_environment, _jax_in_worker = _functions()


class _Environment(MapTransform):
    def map(self, element):
        return _environment(element)


def _through_mp_prefetch(fn, count=4):
    ds = MapDataset.range(count).map(fn).to_iter_dataset()
    return list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))


@pytest.fixture
def parent_env(monkeypatch):
    monkeypatch.delenv(worker_env.SEE_ACCELERATORS_ENV, raising=False)
    for name, value in PARENT.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def _parent_unchanged():
    return all(os.environ.get(name) == value for name, value in PARENT.items())


def test_the_hidden_variables_are_the_documented_ones():
    assert dict(worker_env.HIDDEN) == dict(zip(VARIABLES, HIDDEN, strict=True))
    assert worker_env.SEE_ACCELERATORS_ENV == "GRAIN_WORKERS_SEE_ACCELERATORS"


@pytest.mark.parametrize("method", METHODS)
def test_mp_prefetch_workers_hide_the_accelerators(parent_env, method):
    parent_env.setenv("GRAIN_MP_START_METHOD", method)
    assert _through_mp_prefetch(_environment) == [HIDDEN] * 4
    assert _parent_unchanged()


@pytest.mark.parametrize("method", METHODS)
def test_the_opt_out_leaves_the_workers_the_parents_environment(parent_env, method):
    parent_env.setenv("GRAIN_MP_START_METHOD", method)
    parent_env.setenv(worker_env.SEE_ACCELERATORS_ENV, "1")
    assert _through_mp_prefetch(_environment) == [tuple(PARENT[n] for n in VARIABLES)] * 4


@pytest.mark.parametrize("value", ["true", "YES", " on "])
def test_the_opt_out_is_any_yes(parent_env, value):
    parent_env.setenv(worker_env.SEE_ACCELERATORS_ENV, value)
    assert _through_mp_prefetch(_environment) == [tuple(PARENT[n] for n in VARIABLES)] * 4


@pytest.mark.parametrize("value", ["0", "false", "no", "off", ""])
def test_an_explicit_no_hides_them_as_the_default_does(parent_env, value):
    parent_env.setenv(worker_env.SEE_ACCELERATORS_ENV, value)
    assert _through_mp_prefetch(_environment) == [HIDDEN] * 4


def test_a_bad_opt_out_value_is_named_before_any_worker_starts(parent_env):
    parent_env.setenv(worker_env.SEE_ACCELERATORS_ENV, "gpu")
    ds = MapDataset.range(4).map(_environment).to_iter_dataset()
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    with pytest.raises(ValueError, match=r"GRAIN_WORKERS_SEE_ACCELERATORS='gpu'.* set it to 1"):
        next(iter(ds))
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("grain-worker")]


def test_data_loader_workers_hide_the_accelerators(parent_env):
    def load():
        sampler = IndexSampler(6, NoSharding(), shuffle=False, num_epochs=1)
        loader = DataLoader(
            data_source=list(range(6)),
            sampler=sampler,
            operations=[_Environment()],
            worker_count=2,
        )
        return list(loader)

    assert load() == [HIDDEN] * 6
    parent_env.setenv(worker_env.SEE_ACCELERATORS_ENV, "1")
    assert load() == [tuple(PARENT[n] for n in VARIABLES)] * 6


@pytest.mark.parametrize("method", METHODS)
def test_jax_in_a_worker_sees_only_cpu_devices(parent_env, method):
    if importlib.util.find_spec("jax") is None:  # not imported here: only the workers do
        pytest.skip("jax is not installed")
    parent_env.setenv("GRAIN_MP_START_METHOD", method)
    # The parent asks jax for a GPU; were that passed on, jax in a worker would fail
    # to find one here, or take one on a machine that has it.
    got = _through_mp_prefetch(_jax_in_worker, count=2)
    assert got == [("cpu", ["cpu"])] * 2


@pytest.mark.parametrize("started", [False, True], ids=["imported", "backends_started"])
def test_jax_of_the_parent_is_set_to_cpu_in_a_forked_worker(parent_env, started):
    """jax reads JAX_PLATFORMS when it is imported: a forked worker's copy already was.

    Where the parent had started jax's backends (CPU ones here), the worker keeps
    the copies it inherited and starts none of its own (docs: the limits).
    """
    parent_env.delenv("JAX_PLATFORMS")  # imported here as the user's process would
    jax = pytest.importorskip("jax")
    if started:
        assert {device.platform for device in jax.devices()} == {"cpu"}
    parent_env.setenv("GRAIN_MP_START_METHOD", "fork")
    got = _through_mp_prefetch(_jax_in_worker, count=2)
    assert got == [("cpu", ["cpu"])] * 2
    assert "jax" in sys.modules
