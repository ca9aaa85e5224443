"""grain_index: the index math of grain pipelines, numpy only.

Layout: the lowest layer of the grain workspace; it imports numpy and the
standard library, never another grain package. Everything here is arithmetic
on integer positions, decided before any record is read:

  _shuffle   keyed bijective index shuffle, scalar and vectorized (SHUFFLE.md)
  _seeds     one seed-derivation function for every random stream
  _sharding  ShardOptions, NoSharding and the split of n records over shards
  _sampler   RecordMetadata, IndexSampler, SequentialSampler
  _mixing    the weighted mixing schedule with O(1) lookups
  _cost_mixing  mixing by per-record cost (tokens): CostMixingSchedule
  _window    the window shuffle: a keyed permutation within each window
  _runs      positions as arithmetic runs [start, step, count], for small states
  checks     the argument checks, public for the packages built on this one
"""

from grain_index._cost_mixing import CostMixingSchedule as CostMixingSchedule
from grain_index._mixing import MAX_PERIOD as MAX_PERIOD
from grain_index._mixing import MixingSchedule as MixingSchedule
from grain_index._mixing import integer_weights as integer_weights
from grain_index._runs import decode_runs as decode_runs
from grain_index._runs import encode_runs as encode_runs
from grain_index._sampler import IndexSampler as IndexSampler
from grain_index._sampler import Record as Record
from grain_index._sampler import RecordMetadata as RecordMetadata
from grain_index._sampler import Sampler as Sampler
from grain_index._sampler import SequentialSampler as SequentialSampler
from grain_index._seeds import derive_seed as derive_seed
from grain_index._seeds import derive_seeds as derive_seeds
from grain_index._sharding import NoSharding as NoSharding
from grain_index._sharding import ShardOptions as ShardOptions
from grain_index._sharding import shard_bounds as shard_bounds
from grain_index._shuffle import DEFAULT_ROUNDS as DEFAULT_ROUNDS
from grain_index._shuffle import MAX_RECORDS as MAX_RECORDS
from grain_index._shuffle import index_shuffle as index_shuffle
from grain_index._shuffle import index_shuffle_array as index_shuffle_array
from grain_index._shuffle import index_shuffle_function as index_shuffle_function
from grain_index._shuffle import index_unshuffle as index_unshuffle
from grain_index._shuffle import index_unshuffle_array as index_unshuffle_array
from grain_index._window import window_shuffle as window_shuffle
from grain_index._window import window_shuffle_array as window_shuffle_array

__all__ = [
    "DEFAULT_ROUNDS",
    "MAX_PERIOD",
    "MAX_RECORDS",
    "CostMixingSchedule",
    "IndexSampler",
    "MixingSchedule",
    "NoSharding",
    "Record",
    "RecordMetadata",
    "Sampler",
    "SequentialSampler",
    "ShardOptions",
    "decode_runs",
    "derive_seed",
    "derive_seeds",
    "encode_runs",
    "index_shuffle",
    "index_shuffle_array",
    "index_shuffle_function",
    "index_unshuffle",
    "index_unshuffle_array",
    "integer_weights",
    "shard_bounds",
    "window_shuffle",
    "window_shuffle_array",
]
