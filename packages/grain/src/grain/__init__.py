"""grain: fast, deterministic, preemption-proof input pipelines for JAX.

Installed as the distribution `grainline` (`pip install grainline`; Google's
Grain is `grain` on the registry); `import grain` warns once when Google's `grain`
is installed too (grain._distribution says why it matters).

Layout: the public namespace only. It re-exports the layers below it and
defines no behaviour of its own apart from the `grain` command-line tool
(`grain.convert`, imported on demand, re-exports grain_convert; its `ray`
executor needs the `grainline[ray]` extra):

  grain_index    index shuffle, seeds, sharding, samplers, mixing    (built)
  grain_sources  data sources                                         (built)
  grain_dataset  MapDataset, IterDataset, DatasetIterator             (built)
  grain_mp       worker processes (mp_prefetch), the DataLoader       (built)
  grain_convert  ArrayRecord shards from corpora, locally or on Ray   (built)
  grain_jax      device prefetch, Orbax checkpoints, multi-host       (built)

Namespaces: `grain.checkpoint`, `grain.experimental`, `grain.multiprocessing`,
`grain.samplers`, `grain.sharding`, `grain.sources`, `grain.transforms`,
`grain.constants`, `grain.monitoring` and `grain.python` (the upstream-compatible
flat namespace); `grain.config` holds the settings. `docs/compatibility.md`
compares every public name with Grain 0.2.18.
"""

from importlib import metadata as _metadata

from grain import checkpoint as checkpoint
from grain import constants as constants
from grain import experimental as experimental
from grain import monitoring as monitoring
from grain import multiprocessing as multiprocessing
from grain import python as python
from grain import samplers as samplers
from grain import sharding as sharding
from grain import sources as sources
from grain import transforms as transforms
from grain._distribution import DISTRIBUTION as _DISTRIBUTION
from grain._distribution import GrainDistributionConflictWarning as GrainDistributionConflictWarning
from grain._distribution import _warn_if_conflicting
from grain_dataset import DatasetIterator as DatasetIterator
from grain_dataset import IterDataset as IterDataset
from grain_dataset import MapDataset as MapDataset
from grain_dataset import ReadOptions as ReadOptions
from grain_dataset import config as config
from grain_index import Record as Record
from grain_index import RecordMetadata as RecordMetadata
from grain_mp import DataLoader as DataLoader
from grain_mp import DataLoaderIterator as DataLoaderIterator
from grain_mp import MultiprocessingOptions as MultiprocessingOptions
from grain_mp import load as load

try:
    __version__: str = _metadata.version(_DISTRIBUTION)
except _metadata.PackageNotFoundError:  # run from a source tree without installing
    __version__ = "0.0.0"
_warn_if_conflicting(__version__)
__version_info__: tuple[int, ...] = tuple(
    int(part) for part in __version__.split(".")[:3] if part.isdigit()
)

__all__ = [
    "DataLoader",
    "DataLoaderIterator",
    "DatasetIterator",
    "GrainDistributionConflictWarning",
    "IterDataset",
    "MapDataset",
    "MultiprocessingOptions",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "__version__",
    "__version_info__",
    "checkpoint",
    "config",
    "constants",
    "experimental",
    "load",
    "monitoring",
    "multiprocessing",
    "python",
    "samplers",
    "sharding",
    "sources",
    "transforms",
]
