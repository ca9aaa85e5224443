"""grain.python: the flat namespace of upstream Grain's `import grain.python as grain`."""

from grain import experimental as experimental
from grain_dataset import Batch as Batch
from grain_dataset import DatasetIterator as DatasetIterator
from grain_dataset import FilterTransform as FilterTransform
from grain_dataset import FlatMapTransform as FlatMapTransform
from grain_dataset import IterDataset as IterDataset
from grain_dataset import MapDataset as MapDataset
from grain_dataset import MapTransform as MapTransform
from grain_dataset import MapWithIndex as MapWithIndexTransform
from grain_dataset import RandomMapTransform as RandomMapTransform
from grain_dataset import ReadOptions as ReadOptions
from grain_dataset import Transformation as Transformation
from grain_index import IndexSampler as IndexSampler
from grain_index import NoSharding as NoSharding
from grain_index import Record as Record
from grain_index import RecordMetadata as RecordMetadata
from grain_index import Sampler as Sampler
from grain_index import SequentialSampler as SequentialSampler
from grain_index import ShardOptions as ShardOptions
from grain_mp import DataLoader as DataLoader
from grain_mp import MultiprocessingOptions as MultiprocessingOptions
from grain_mp import PyGrainDatasetIterator as PyGrainDatasetIterator
from grain_sources import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources import InMemoryDataSource as InMemoryDataSource
from grain_sources import RandomAccessDataSource as RandomAccessDataSource
from grain_sources import RangeDataSource as RangeDataSource
from grain_sources import SharedMemoryDataSource as SharedMemoryDataSource

__all__ = [
    "ArrayRecordDataSource",
    "Batch",
    "DataLoader",
    "DatasetIterator",
    "FilterTransform",
    "FlatMapTransform",
    "InMemoryDataSource",
    "IndexSampler",
    "IterDataset",
    "MapDataset",
    "MapTransform",
    "MapWithIndexTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "PyGrainDatasetIterator",
    "RandomAccessDataSource",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "Sampler",
    "SequentialSampler",
    "ShardOptions",
    "SharedMemoryDataSource",
    "Transformation",
    "experimental",
]
