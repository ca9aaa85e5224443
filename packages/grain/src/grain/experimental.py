"""grain.experimental: APIs that may still change."""

from grain_dataset import BestFitPackIterDataset as BestFitPackIterDataset
from grain_dataset import BOSHandling as BOSHandling
from grain_dataset import CachedMapDataset as CachedMapDataset
from grain_dataset import ConcatThenSplitIterDataset as ConcatThenSplitIterDataset
from grain_dataset import DatasetOptions as DatasetOptions
from grain_dataset import ExecutionTrackingMode as ExecutionTrackingMode
from grain_dataset import FirstFitPackIterDataset as FirstFitPackIterDataset
from grain_dataset import FlatMapIterDataset as FlatMapIterDataset
from grain_dataset import FlatMapMapDataset as FlatMapMapDataset
from grain_dataset import FlatMapTransform as FlatMapTransform
from grain_dataset import InterleaveIterDataset as InterleaveIterDataset
from grain_dataset import LimitIterDataset as LimitIterDataset
from grain_dataset import ParquetIterDataset as ParquetIterDataset
from grain_dataset import RebatchIterDataset as RebatchIterDataset
from grain_dataset import RepeatIterDataset as RepeatIterDataset
from grain_dataset import ShapeDtypeStruct as ShapeDtypeStruct
from grain_dataset import TFRecordIterDataset as TFRecordIterDataset
from grain_dataset import ThreadPrefetchIterDataset as ThreadPrefetchIterDataset
from grain_dataset import WindowShuffleIterDataset as WindowShuffleIterDataset
from grain_dataset import WindowShuffleMapDataset as WindowShuffleMapDataset
from grain_dataset import WithOptionsIterDataset as WithOptionsIterDataset
from grain_dataset import ZipIterDataset as ZipIterDataset
from grain_dataset import ZipMapDataset as ZipMapDataset
from grain_dataset import apply_transformations as apply_transformations
from grain_dataset import (
    assert_equal_output_after_checkpoint as assert_equal_output_after_checkpoint,
)
from grain_dataset import batch_and_pad as batch_and_pad
from grain_dataset import get_element_spec as get_element_spec
from grain_index import index_shuffle as index_shuffle
from grain_jax._device_put import device_put as device_put
from grain_jax._sharding import make_global_batch as make_global_batch
from grain_mp import PerformanceConfig as PerformanceConfig
from grain_mp import pick_performance_config as pick_performance_config

__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "CachedMapDataset",
    "ConcatThenSplitIterDataset",
    "DatasetOptions",
    "ExecutionTrackingMode",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "ParquetIterDataset",
    "PerformanceConfig",
    "RebatchIterDataset",
    "RepeatIterDataset",
    "ShapeDtypeStruct",
    "TFRecordIterDataset",
    "ThreadPrefetchIterDataset",
    "WindowShuffleIterDataset",
    "WindowShuffleMapDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "device_put",
    "get_element_spec",
    "index_shuffle",
    "make_global_batch",
    "pick_performance_config",
]
