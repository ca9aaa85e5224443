"""pick_performance_config: choices from a measured sample, within the RAM budget."""

import time

import numpy as np
import pytest

from grain_dataset import MapDataset
from grain_mp import MultiprocessingOptions
from grain_mp._autotune import PerformanceConfig, pick_performance_config


def _slow_image(i):
    time.sleep(0.001)
    return np.zeros((64, 64, 3), np.uint8) + (i % 256)


def test_cheap_elements_get_no_workers():
    config = pick_performance_config(MapDataset.range(1000), ram_budget_mb=64)
    assert isinstance(config, PerformanceConfig)
    assert config.multiprocessing_options.num_workers == 0
    assert config.read_options.prefetch_buffer_size >= 1


def test_costly_elements_get_workers_bounded_by_max_workers():
    ds = MapDataset.range(100).map(_slow_image)
    config = pick_performance_config(ds, ram_budget_mb=64)
    assert config.multiprocessing_options.num_workers >= 1
    capped = pick_performance_config(ds, ram_budget_mb=64, max_workers=1)
    assert capped.multiprocessing_options.num_workers == 1


def test_buffers_fit_the_ram_budget():
    ds = MapDataset.range(50).map(lambda i: np.zeros(1_000_000, np.uint8))  # 1 MB elements
    config = pick_performance_config(ds, ram_budget_mb=8, max_buffer_size=100)
    options = config.multiprocessing_options
    held = max(1, options.num_workers) * options.per_worker_buffer_size * 1_000_000
    assert held <= 8e6
    assert config.read_options.prefetch_buffer_size * 1_000_000 <= 8e6
    small = pick_performance_config(ds, ram_budget_mb=8, max_buffer_size=2)
    assert small.multiprocessing_options.per_worker_buffer_size <= 2


def test_iter_datasets_are_sampled_too_and_the_config_runs():
    ds = MapDataset.range(40).map(_slow_image).to_iter_dataset()
    config = pick_performance_config(ds, ram_budget_mb=32, max_workers=2)
    out = list(ds.mp_prefetch(config.multiprocessing_options))
    assert [int(x[0, 0, 0]) for x in out] == list(range(40))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ram_budget_mb": 0}, ValueError),
        ({"ram_budget_mb": "1"}, TypeError),
        ({"ram_budget_mb": 8, "max_workers": -1}, ValueError),
        ({"ram_budget_mb": 8, "max_buffer_size": 0}, ValueError),
    ],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        pick_performance_config(MapDataset.range(3), **kwargs)


def test_empty_dataset_is_named():
    with pytest.raises(ValueError, match="empty"):
        pick_performance_config(MapDataset.range(0), ram_budget_mb=8)


def test_options_type():
    assert isinstance(
        pick_performance_config(MapDataset.range(3), ram_budget_mb=8).multiprocessing_options,
        MultiprocessingOptions,
    )
