"""grain: fast, deterministic, preemption-proof input pipelines for JAX.

Layout: the public namespace only. It re-exports the layers below it and
defines no behaviour of its own apart from the `grain` command-line tool:

  grain_index    index shuffle, seeds, sharding, samplers, mixing    (built)
  grain_sources  data sources                                         (built)
  grain_dataset  MapDataset, IterDataset, DatasetIterator             (built)
  grain_mp       worker processes (mp_prefetch), the DataLoader       (built)
  grain_jax      device prefetch, Orbax checkpoints, multi-host       (built)

Namespaces: `grain.checkpoint`, `grain.experimental`, `grain.multiprocessing`,
`grain.samplers`, `grain.sharding`, `grain.sources`, `grain.transforms` and
`grain.python` (the upstream-compatible flat namespace).
"""

from grain import checkpoint as checkpoint
from grain import experimental as experimental
from grain import multiprocessing as multiprocessing
from grain import python as python
from grain import samplers as samplers
from grain import sharding as sharding
from grain import sources as sources
from grain import transforms as transforms
from grain_dataset import DatasetIterator as DatasetIterator
from grain_dataset import IterDataset as IterDataset
from grain_dataset import MapDataset as MapDataset
from grain_dataset import ReadOptions as ReadOptions
from grain_index import Record as Record
from grain_index import RecordMetadata as RecordMetadata
from grain_mp import MultiprocessingOptions as MultiprocessingOptions

__all__ = [
    "DatasetIterator",
    "IterDataset",
    "MapDataset",
    "MultiprocessingOptions",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "checkpoint",
    "experimental",
    "multiprocessing",
    "python",
    "samplers",
    "sharding",
    "sources",
    "transforms",
]
