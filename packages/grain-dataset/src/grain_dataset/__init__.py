"""grain_dataset: MapDataset, IterDataset and DatasetIterator.

Layout: the dataset layer, above grain_index (index math) and grain_sources,
below grain_mp. The private modules live in rooms, each with a README.md of
what it holds and what it may import (test_layering checks it); a room
imports only the rooms above it in this table:

  _common        values, protocols, the declared stage traits (_contract)
  _runtime       what each iterator carries: guard, fingerprint, state files
  _core          the three bases (_base), the stage bases, seeding, statistics
  _threads       to_iter_dataset's read-ahead, the per-stage prefetch thread
  _map_stages    MapDataset stages (and their IterDataset twins)
  _iter_stages   IterDataset stages, streaming sources, positional pipelines
  _sequences     packing, concat-split, token-budget batches

Each transformation module registers its methods with `_core._base`, so
importing this package attaches them all. The public modules: this one,
`extension` (what grain-mp and grain-jax build on), `stages` (the public stage
classes) and `monitoring`.
"""

from grain_dataset import monitoring as monitoring
from grain_dataset import stages as stages
from grain_dataset._common._config import Config as Config
from grain_dataset._common._config import config as config
from grain_dataset._common._conformance import (
    assert_equal_output_after_checkpoint as assert_equal_output_after_checkpoint,
)
from grain_dataset._common._options import DatasetOptions as DatasetOptions
from grain_dataset._common._options import ExecutionTrackingMode as ExecutionTrackingMode
from grain_dataset._common._options import ReadOptions as ReadOptions
from grain_dataset._common._rng import RngPool as RngPool
from grain_dataset._common._transforms import Batch as Batch
from grain_dataset._common._transforms import DatasetSelectionMap as DatasetSelectionMap
from grain_dataset._common._transforms import FilterTransform as FilterTransform
from grain_dataset._common._transforms import FlatMapTransform as FlatMapTransform
from grain_dataset._common._transforms import MapTransform as MapTransform
from grain_dataset._common._transforms import MapWithIndex as MapWithIndex
from grain_dataset._common._transforms import RandomMapTransform as RandomMapTransform
from grain_dataset._common._transforms import TfRandomMap as TfRandomMap
from grain_dataset._common._transforms import Transformation as Transformation
from grain_dataset._common._transforms import Transformations as Transformations
from grain_dataset._common._transforms import (
    UnsupportedTransformationError as UnsupportedTransformationError,
)
from grain_dataset._common._tree import stack as stack
from grain_dataset._core import _seeding  # noqa: F401 - registers its methods with _base
from grain_dataset._core._base import DatasetIterator as DatasetIterator
from grain_dataset._core._base import IterDataset as IterDataset
from grain_dataset._core._base import MapDataset as MapDataset
from grain_dataset._core._element_spec import ShapeDtypeStruct as ShapeDtypeStruct
from grain_dataset._core._element_spec import ShapeDtypeStructProtocol as ShapeDtypeStructProtocol
from grain_dataset._core._element_spec import get_element_spec as get_element_spec
from grain_dataset._core._next_index import get_next_index as get_next_index
from grain_dataset._core._next_index import set_next_index as set_next_index
from grain_dataset._core._stats import PipelineStats as PipelineStats
from grain_dataset._core._stats import StageStats as StageStats
from grain_dataset._core._stats import track as track_stats
from grain_dataset._iter_stages import _iter_map, _iter_mix, _mp_hook  # noqa: F401 - each registers
from grain_dataset._map_stages import (  # noqa: F401 - each registers with _base
    _batch,
    _combine,
    _map,
    _repeat,
    _shuffle,
    _slice,
    _source,
)
from grain_dataset._map_stages._apply import apply_transformations as apply_transformations
from grain_dataset._map_stages._pad import batch_and_pad as batch_and_pad
from grain_dataset._runtime._fingerprint import UnverifiedStateWarning as UnverifiedStateWarning
from grain_dataset._runtime._fingerprint import force_restore as force_restore
from grain_dataset._runtime._fingerprint import unstamped as unstamped
from grain_dataset._runtime._fingerprint import without_fingerprint as without_fingerprint
from grain_dataset._sequences._concat_split import BOSHandling as BOSHandling
from grain_dataset._threads import _read_ahead  # noqa: F401 - registers to_iter_dataset
from grain_dataset.stages import *  # noqa: F403 - the public stages, listed there

__all__ = [
    "BOSHandling",
    "Batch",
    "Config",
    "DatasetIterator",
    "DatasetOptions",
    "DatasetSelectionMap",
    "ExecutionTrackingMode",
    "FilterTransform",
    "FlatMapTransform",
    "IterDataset",
    "MapDataset",
    "MapTransform",
    "MapWithIndex",
    "PipelineStats",
    "RandomMapTransform",
    "ReadOptions",
    "RngPool",
    "ShapeDtypeStruct",
    "ShapeDtypeStructProtocol",
    "StageStats",
    "TfRandomMap",
    "Transformation",
    "Transformations",
    "UnsupportedTransformationError",
    "UnverifiedStateWarning",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "config",
    "force_restore",
    "get_element_spec",
    "get_next_index",
    "monitoring",
    "set_next_index",
    "stack",
    "track_stats",
    "unstamped",
    "without_fingerprint",
]
# The public stage classes, one list for this package and `grain.experimental`.
__all__ += stages.__all__
