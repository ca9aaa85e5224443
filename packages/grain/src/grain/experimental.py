"""grain.experimental: APIs that may still change.

`device_put` and `make_global_batch` come with `pip install "grainline[jax]"`;
without it they raise an ImportError that says so.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from grain._jax_extra import jax_name as _jax_name
from grain_dataset import BOSHandling as BOSHandling
from grain_dataset import DatasetOptions as DatasetOptions
from grain_dataset import ExecutionTrackingMode as ExecutionTrackingMode
from grain_dataset import FlatMapTransform as FlatMapTransform
from grain_dataset import MapWithIndex as MapWithIndexTransform
from grain_dataset import RngPool as RngPool
from grain_dataset import ShapeDtypeStruct as ShapeDtypeStruct
from grain_dataset import ShapeDtypeStructProtocol as ShapeDtypeStructProtocol
from grain_dataset import UnverifiedStateWarning as UnverifiedStateWarning
from grain_dataset import apply_transformations as apply_transformations
from grain_dataset import (
    assert_equal_output_after_checkpoint as assert_equal_output_after_checkpoint,
)
from grain_dataset import batch_and_pad as batch_and_pad
from grain_dataset import force_restore as force_restore
from grain_dataset import get_element_spec as get_element_spec
from grain_dataset import get_next_index as get_next_index
from grain_dataset import set_next_index as set_next_index
from grain_dataset import stages as _stages
from grain_dataset import without_fingerprint as without_fingerprint
from grain_dataset.stages import *  # noqa: F403 - the public stages (grain_dataset.stages)
from grain_index import index_shuffle as index_shuffle
from grain_mp import ElasticIterator as ElasticIterator
from grain_mp import PackAndBatchOperation as PackAndBatchOperation
from grain_mp import PerformanceConfig as PerformanceConfig
from grain_mp import RayWorkers as RayWorkers
from grain_mp import multithread_prefetch as multithread_prefetch
from grain_mp import pick_performance_config as pick_performance_config

if _TYPE_CHECKING:
    from grain_jax import device_put as device_put
    from grain_jax import make_global_batch as make_global_batch

# Installed with `pip install "grainline[jax]"`; looked up on first use (grain._jax_extra).
_JAX_NAMES = frozenset({"device_put", "make_global_batch"})

__all__ = [
    "BOSHandling",
    "DatasetOptions",
    "ElasticIterator",
    "ExecutionTrackingMode",
    "FlatMapTransform",
    "MapWithIndexTransform",
    "PackAndBatchOperation",
    "PerformanceConfig",
    "RayWorkers",
    "RngPool",
    "ShapeDtypeStruct",
    "ShapeDtypeStructProtocol",
    "UnverifiedStateWarning",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "device_put",
    "force_restore",
    "get_element_spec",
    "get_next_index",
    "index_shuffle",
    "make_global_batch",
    "multithread_prefetch",
    "pick_performance_config",
    "set_next_index",
    "without_fingerprint",
]
__all__ += _stages.__all__


def __getattr__(name: str) -> _Any:
    if name in _JAX_NAMES:
        value = _jax_name(name, __name__)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grain.experimental' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
