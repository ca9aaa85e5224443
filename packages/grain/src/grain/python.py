"""grain.python: the flat namespace of upstream Grain's `import grain.python as grain`."""

from grain import experimental as experimental
from grain_index import IndexSampler as IndexSampler
from grain_index import NoSharding as NoSharding
from grain_index import Record as Record
from grain_index import RecordMetadata as RecordMetadata
from grain_index import Sampler as Sampler
from grain_index import SequentialSampler as SequentialSampler
from grain_index import ShardOptions as ShardOptions

__all__ = [
    "IndexSampler",
    "NoSharding",
    "Record",
    "RecordMetadata",
    "Sampler",
    "SequentialSampler",
    "ShardOptions",
    "experimental",
]
