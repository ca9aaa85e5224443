"""grain_dataset.stages: the public stage classes, constructed directly.

``Stage(parent, ...)`` builds one, as `grain.experimental` offers them (the
methods of MapDataset and IterDataset build the others). This list is the one
registration of a public stage: `grain_dataset` and `grain.experimental` export
exactly these names, and the export tests derive their pins from it. A stage's
traits (grain_dataset._common._contract) live on its class, in its own module.
"""

from grain_dataset._iter_stages._cache_iter import CacheIterDataset as CacheIterDataset
from grain_dataset._iter_stages._file_iter import ParquetIterDataset as ParquetIterDataset
from grain_dataset._iter_stages._file_iter import TFRecordIterDataset as TFRecordIterDataset
from grain_dataset._iter_stages._hf_iter import HFIterDataset as HFIterDataset
from grain_dataset._iter_stages._interleave import InterleaveIterDataset as InterleaveIterDataset
from grain_dataset._iter_stages._limit import LimitIterDataset as LimitIterDataset
from grain_dataset._iter_stages._rebatch import RebatchIterDataset as RebatchIterDataset
from grain_dataset._iter_stages._record_range_iter import (
    RecordRangeIterDataset as RecordRangeIterDataset,
)
from grain_dataset._iter_stages._record_range_iter import (
    ShardedJsonLinesIterDataset as ShardedJsonLinesIterDataset,
)
from grain_dataset._iter_stages._record_range_iter import (
    ShardedParquetIterDataset as ShardedParquetIterDataset,
)
from grain_dataset._iter_stages._record_range_iter import (
    ShardedTFRecordIterDataset as ShardedTFRecordIterDataset,
)
from grain_dataset._iter_stages._skip import SkipIterDataset as SkipIterDataset
from grain_dataset._iter_stages._with_options import (
    WithOptionsIterDataset as WithOptionsIterDataset,
)
from grain_dataset._map_stages._cache import CachedMapDataset as CachedMapDataset
from grain_dataset._map_stages._flat_map import FlatMapIterDataset as FlatMapIterDataset
from grain_dataset._map_stages._flat_map import FlatMapMapDataset as FlatMapMapDataset
from grain_dataset._map_stages._repeat import RepeatIterDataset as RepeatIterDataset
from grain_dataset._map_stages._window_shuffle import (
    WindowShuffleIterDataset as WindowShuffleIterDataset,
)
from grain_dataset._map_stages._window_shuffle import (
    WindowShuffleMapDataset as WindowShuffleMapDataset,
)
from grain_dataset._map_stages._zip import ZipIterDataset as ZipIterDataset
from grain_dataset._map_stages._zip import ZipMapDataset as ZipMapDataset
from grain_dataset._sequences._concat_split import (
    ConcatThenSplitIterDataset as ConcatThenSplitIterDataset,
)
from grain_dataset._sequences._packing import BestFitPackIterDataset as BestFitPackIterDataset
from grain_dataset._sequences._packing import FirstFitPackIterDataset as FirstFitPackIterDataset
from grain_dataset._sequences._token_budget import (
    TokenBudgetBatchIterDataset as TokenBudgetBatchIterDataset,
)
from grain_dataset._threads._thread_prefetch import (
    ThreadPrefetchDatasetIterator as ThreadPrefetchDatasetIterator,
)
from grain_dataset._threads._thread_prefetch import (
    ThreadPrefetchIterDataset as ThreadPrefetchIterDataset,
)

__all__ = [
    "BestFitPackIterDataset",
    "CacheIterDataset",
    "CachedMapDataset",
    "ConcatThenSplitIterDataset",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "HFIterDataset",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "ParquetIterDataset",
    "RebatchIterDataset",
    "RecordRangeIterDataset",
    "RepeatIterDataset",
    "ShardedJsonLinesIterDataset",
    "ShardedParquetIterDataset",
    "ShardedTFRecordIterDataset",
    "SkipIterDataset",
    "TFRecordIterDataset",
    "ThreadPrefetchDatasetIterator",
    "ThreadPrefetchIterDataset",
    "TokenBudgetBatchIterDataset",
    "WindowShuffleIterDataset",
    "WindowShuffleMapDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
]
