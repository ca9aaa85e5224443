"""grain_dataset: MapDataset, IterDataset and DatasetIterator.

Layout: the dataset layer, above grain_index (index math) and grain_sources,
below grain_mp. `_base` holds the three base classes and nothing else; each
transformation is a module of its own that registers itself with `_base` (or
is constructed directly, as `grain.experimental` classes are), so importing
this package attaches them all:

  _source, _map, _shuffle, _slice, _repeat, _batch, _combine    MapDataset stages
  _seeding                                                      MapDataset.seed
  _window_shuffle, _zip, _flat_map, _cache                      more stages (both kinds)
  _read_ahead, _daemon_pool                                     to_iter_dataset's threads
  _iter_map, _iter_mix, _with_options, _mp_hook                 IterDataset stages
  _limit, _rebatch, _file_iter, _interleave                     more IterDataset stages
  _record_range_iter, _hf_iter                                  sharded streaming sources
  _packing, _concat_split, _token_budget                        sequence models: pack, batch
  _cost_mix                                                     mix(costs=...): by tokens
  _thread_prefetch                                              a background thread per stage
  _transforms, _tree, _pad, _options, _apply, _element_spec     protocols, batching, options
  _conformance                                                  the checkpoint contract check
  _stats, _pipeline_repr                                        statistics and str(ds)
  extension       what grain-mp and grain-jax build on (stage bases, state checks, ...)
"""

# Each of these registers its transformations with `_core._base` on import.
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
from grain_dataset._core import _seeding  # noqa: F401
from grain_dataset._core._apply import apply_transformations as apply_transformations
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
from grain_dataset._iter_stages import _iter_map, _iter_mix, _mp_hook  # noqa: F401
from grain_dataset._map_stages import (  # noqa: F401
    _batch,
    _combine,
    _map,
    _repeat,
    _shuffle,
    _slice,
    _source,
)
from grain_dataset._map_stages._pad import batch_and_pad as batch_and_pad
from grain_dataset._runtime._fingerprint import UnverifiedStateWarning as UnverifiedStateWarning
from grain_dataset._runtime._fingerprint import force_restore as force_restore
from grain_dataset._runtime._fingerprint import unstamped as unstamped
from grain_dataset._runtime._fingerprint import without_fingerprint as without_fingerprint
from grain_dataset._sequences._concat_split import BOSHandling as BOSHandling
from grain_dataset._threads import _read_ahead  # noqa: F401
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
