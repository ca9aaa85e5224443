"""grain.experimental: APIs that may still change."""

from grain_dataset import DatasetOptions as DatasetOptions
from grain_dataset import ExecutionTrackingMode as ExecutionTrackingMode
from grain_dataset import FlatMapTransform as FlatMapTransform
from grain_dataset import ParquetIterDataset as ParquetIterDataset
from grain_dataset import TFRecordIterDataset as TFRecordIterDataset
from grain_dataset import WithOptionsIterDataset as WithOptionsIterDataset
from grain_dataset import (
    assert_equal_output_after_checkpoint as assert_equal_output_after_checkpoint,
)
from grain_index import index_shuffle as index_shuffle

__all__ = [
    "DatasetOptions",
    "ExecutionTrackingMode",
    "FlatMapTransform",
    "ParquetIterDataset",
    "TFRecordIterDataset",
    "WithOptionsIterDataset",
    "assert_equal_output_after_checkpoint",
    "index_shuffle",
]
