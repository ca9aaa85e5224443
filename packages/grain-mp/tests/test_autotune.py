"""pick_performance_config: choices from a measured sample, within the budget and the limits.

Grain 0.2.18's signature (black box): ``pick_performance_config(ds, *,
ram_budget_mb, max_workers, max_buffer_size, samples_to_check=5)``, the three
limits required keyword arguments that may be None; ``PerformanceConfig()``
holds two None options by default.
"""

import inspect
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset
from grain_mp import MultiprocessingOptions, PerformanceConfig, pick_performance_config
from grain_mp._autotune import choose

CPUS = os.cpu_count() or 1


def _slow_image(i):
    time.sleep(0.001)
    return np.zeros((64, 64, 3), np.uint8) + (i % 256)


def _pick(ds, ram_budget_mb=64, max_workers=None, max_buffer_size=None, **kwargs):
    return pick_performance_config(
        ds,
        ram_budget_mb=ram_budget_mb,
        max_workers=max_workers,
        max_buffer_size=max_buffer_size,
        **kwargs,
    )


def test_the_signature_is_graines():
    parameters = inspect.signature(pick_performance_config).parameters
    assert list(parameters) == [
        "ds",
        "ram_budget_mb",
        "max_workers",
        "max_buffer_size",
        "samples_to_check",
    ]
    assert all(p.kind is p.KEYWORD_ONLY for p in list(parameters.values())[1:])
    assert [p.default for p in list(parameters.values())[1:4]] == [inspect.Parameter.empty] * 3
    assert parameters["samples_to_check"].default == 5
    with pytest.raises(TypeError):
        pick_performance_config(MapDataset.range(3), 8, 1, 1)
    with pytest.raises(TypeError):
        pick_performance_config(MapDataset.range(3), ram_budget_mb=8)


def test_performance_config_defaults_to_none():
    assert PerformanceConfig() == PerformanceConfig(None, None)
    assert PerformanceConfig().multiprocessing_options is None
    assert PerformanceConfig().read_options is None


def test_cheap_elements_get_no_workers():
    config = _pick(MapDataset.range(1000))
    assert isinstance(config, PerformanceConfig)
    assert config.multiprocessing_options.num_workers == 0
    assert config.read_options.prefetch_buffer_size >= 1


def test_costly_elements_get_workers_bounded_by_max_workers():
    ds = MapDataset.range(100).map(_slow_image)
    config = _pick(ds)
    assert config.multiprocessing_options.num_workers == CPUS
    capped = _pick(ds, max_workers=1)
    assert capped.multiprocessing_options.num_workers == 1
    assert _pick(ds, max_workers=0).multiprocessing_options.num_workers == 0


def test_buffers_fit_the_ram_budget():
    ds = MapDataset.range(50).map(lambda i: np.zeros(1_000_000, np.uint8))  # 1 MB elements
    config = _pick(ds, ram_budget_mb=8, max_buffer_size=100)
    options = config.multiprocessing_options
    held = max(1, options.num_workers) * options.per_worker_buffer_size * 1_000_000
    assert held <= 8e6
    assert config.read_options.prefetch_buffer_size * 1_000_000 <= 8e6
    small = _pick(ds, ram_budget_mb=8, max_buffer_size=2)
    assert small.multiprocessing_options.per_worker_buffer_size <= 2
    assert small.read_options.prefetch_buffer_size <= 2


def test_none_budget_uses_the_machines_memory_and_samples_are_counted():
    calls = []

    def count(i):
        calls.append(i)
        return i

    config = _pick(MapDataset.range(100).map(count), ram_budget_mb=None, samples_to_check=3)
    assert len(calls) == 3
    assert config.read_options.prefetch_buffer_size == 500  # plenty of memory for ints


@pytest.mark.timeout(60)
def test_iter_datasets_are_sampled_too_and_the_config_runs():
    ds = MapDataset.range(40).map(_slow_image).to_iter_dataset()
    config = _pick(ds, ram_budget_mb=32, max_workers=2)
    out = list(ds.mp_prefetch(config.multiprocessing_options))
    assert [int(x[0, 0, 0]) for x in out] == list(range(40))


@given(
    cost=st.sampled_from([0.0, 1e-6, 1e-4, 2e-4, 1e-3, 1.0]),
    size=st.integers(0, 10**10),
    budget=st.one_of(st.floats(0.001, 1e6), st.integers(1, 10**6)),
    max_workers=st.one_of(st.none(), st.integers(0, 256)),
    max_buffer_size=st.one_of(st.none(), st.integers(1, 10_000)),
    cpus=st.integers(1, 512),
)
@settings(max_examples=500, deadline=None)
def test_choices_never_exceed_the_limits(cost, size, budget, max_workers, max_buffer_size, cpus):
    workers, buffer, read_ahead = choose(
        cost,
        size,
        ram_budget_mb=budget,
        max_workers=max_workers,
        max_buffer_size=max_buffer_size,
        cpus=cpus,
    )
    assert 0 <= workers <= cpus
    if max_workers is not None:
        assert workers <= max_workers
    assert buffer >= 1
    assert read_ahead >= 1
    if max_buffer_size is not None:
        assert buffer <= max_buffer_size
        assert read_ahead <= max_buffer_size
    # Within half the budget each, unless a single element is already more.
    half = budget * 1e6 / 2
    if buffer > 1:
        assert max(1, workers) * buffer * max(1, size) <= half
    if read_ahead > 1:
        assert read_ahead * max(1, size) <= half
    if workers > 1:
        assert workers * max(1, size) <= half
    MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)  # valid


@pytest.mark.parametrize(
    ("limits", "workers"),
    [((None, None), CPUS), ((0, 1), 0), ((1, 1), 1), ((3, 7), min(3, CPUS))],
)
def test_real_picks_respect_the_limits(limits, workers):
    max_workers, max_buffer_size = limits
    ds = MapDataset.range(20).map(_slow_image)
    config = _pick(ds, ram_budget_mb=1024, max_workers=max_workers, max_buffer_size=max_buffer_size)
    assert config.multiprocessing_options.num_workers == workers
    if max_buffer_size is not None:
        assert config.multiprocessing_options.per_worker_buffer_size <= max_buffer_size
        assert config.read_options.prefetch_buffer_size <= max_buffer_size


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ram_budget_mb": 0}, ValueError),
        ({"ram_budget_mb": "1"}, TypeError),
        ({"max_workers": -1}, ValueError),
        ({"max_workers": 1.5}, TypeError),
        ({"max_buffer_size": 0}, ValueError),
        ({"samples_to_check": 0}, ValueError),
    ],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        _pick(MapDataset.range(3), **kwargs)


def test_empty_dataset_is_named():
    with pytest.raises(ValueError, match="empty"):
        _pick(MapDataset.range(0))
