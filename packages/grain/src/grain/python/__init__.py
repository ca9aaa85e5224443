"""grain.python: the flat namespace of upstream Grain's `import grain.python as grain`.

The Orbax names (`PyGrainCheckpointSave`, ... and the guide's `GrainCheckpointSave`,
...) and `ShardByJaxProcess` load grain-jax on first use, not at import; without
`pip install "grainline[jax]"` they raise an ImportError that says so.
`grain.python.experimental` is `grain.experimental` under Grain's second name.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from grain._jax_extra import jax_name as _jax_name
from grain.python import experimental as experimental
from grain_dataset import Batch as Batch
from grain_dataset import DatasetIterator as DatasetIterator
from grain_dataset import DatasetSelectionMap as DatasetSelectionMap
from grain_dataset import FilterTransform as FilterTransform
from grain_dataset import FlatMapTransform as FlatMapTransform
from grain_dataset import IterDataset as IterDataset
from grain_dataset import MapDataset as MapDataset
from grain_dataset import MapTransform as MapTransform
from grain_dataset import MapWithIndex as MapWithIndexTransform
from grain_dataset import RandomMapTransform as RandomMapTransform
from grain_dataset import ReadOptions as ReadOptions
from grain_dataset import Transformation as Transformation
from grain_dataset import Transformations as Transformations
from grain_dataset import config as config
from grain_index import IndexSampler as IndexSampler
from grain_index import NoSharding as NoSharding
from grain_index import Record as Record
from grain_index import RecordMetadata as RecordMetadata
from grain_index import Sampler as Sampler
from grain_index import SequentialSampler as SequentialSampler
from grain_index import ShardOptions as ShardOptions
from grain_index.constants import DATASET_INDEX as DATASET_INDEX
from grain_index.constants import EPOCH as EPOCH
from grain_index.constants import INDEX as INDEX
from grain_index.constants import META_FEATURES as META_FEATURES
from grain_index.constants import RECORD as RECORD
from grain_index.constants import RECORD_KEY as RECORD_KEY
from grain_index.constants import SEED as SEED
from grain_mp import BatchOperation as BatchOperation
from grain_mp import DataLoader as DataLoader
from grain_mp import FilterOperation as FilterOperation
from grain_mp import MapOperation as MapOperation
from grain_mp import MultiprocessingOptions as MultiprocessingOptions
from grain_mp import Operation as Operation
from grain_mp import PyGrainDatasetIterator as PyGrainDatasetIterator
from grain_mp import RandomMapOperation as RandomMapOperation
from grain_mp import SharedMemoryArray as SharedMemoryArray
from grain_mp import load as load
from grain_sources import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources import InMemoryDataSource as InMemoryDataSource
from grain_sources import RandomAccessDataSource as RandomAccessDataSource
from grain_sources import RangeDataSource as RangeDataSource
from grain_sources import SharedMemoryDataSource as SharedMemoryDataSource

if _TYPE_CHECKING:
    from grain_jax import CheckpointHandler as GrainCheckpointHandler
    from grain_jax import CheckpointHandler as PyGrainCheckpointHandler
    from grain_jax import CheckpointRestore as GrainCheckpointRestore
    from grain_jax import CheckpointRestore as PyGrainCheckpointRestore
    from grain_jax import CheckpointSave as GrainCheckpointSave
    from grain_jax import CheckpointSave as PyGrainCheckpointSave
    from grain_jax import ShardByJaxProcess as ShardByJaxProcess

# Upstream's grain.python names, then the DataLoader guide's: the same three objects;
# and ShardByJaxProcess. All need `pip install "grainline[jax]"`.
_JAX_NAMES = {
    "ShardByJaxProcess": "ShardByJaxProcess",
    "PyGrainCheckpointHandler": "CheckpointHandler",
    "PyGrainCheckpointRestore": "CheckpointRestore",
    "PyGrainCheckpointSave": "CheckpointSave",
    "GrainCheckpointHandler": "CheckpointHandler",
    "GrainCheckpointRestore": "CheckpointRestore",
    "GrainCheckpointSave": "CheckpointSave",
}


def __getattr__(name: str) -> _Any:
    target = _JAX_NAMES.get(name)
    if target is None:
        raise AttributeError(f"module 'grain.python' has no attribute {name!r}")
    return _jax_name(target, __name__)


__all__ = [
    "DATASET_INDEX",
    "EPOCH",
    "INDEX",
    "META_FEATURES",
    "RECORD",
    "RECORD_KEY",
    "SEED",
    "ArrayRecordDataSource",
    "Batch",
    "BatchOperation",
    "DataLoader",
    "DatasetIterator",
    "DatasetSelectionMap",
    "FilterOperation",
    "FilterTransform",
    "FlatMapTransform",
    "GrainCheckpointHandler",
    "GrainCheckpointRestore",
    "GrainCheckpointSave",
    "InMemoryDataSource",
    "IndexSampler",
    "IterDataset",
    "MapDataset",
    "MapOperation",
    "MapTransform",
    "MapWithIndexTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "Operation",
    "PyGrainCheckpointHandler",
    "PyGrainCheckpointRestore",
    "PyGrainCheckpointSave",
    "PyGrainDatasetIterator",
    "RandomAccessDataSource",
    "RandomMapOperation",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "Sampler",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "SharedMemoryArray",
    "SharedMemoryDataSource",
    "Transformation",
    "Transformations",
    "config",
    "experimental",
    "load",
]


def __dir__() -> list[str]:
    return sorted(__all__)
