"""Errors that clients match by message (`assertRaisesRegex`).

The errors Grain's documents and its users' tests name: an empty sampler,
elements of different structures in a batch, bad batch sizes, shard options,
seeds, non-callable transforms, slicing, repeat, mixing, zip, closed iterators,
states past the end, unknown config options. Where upstream raises, the
comparison (compare.py) checks that our message contains upstream's; the
neighbouring value cases pin what upstream accepts (indexes past the end of a
MapDataset wrap around, a filter's truthy result keeps the element).
"""

from __future__ import annotations

import numpy as np

import grain
import grain.python as pg
from _registry import bad, case, sampler, take

M = grain.MapDataset

# -- samplers ------------------------------------------------------------------------------
bad("err.sampler.num_records_zero", lambda: pg.IndexSampler(num_records=0))
bad("err.sampler.num_records_negative", lambda: sampler(-3, num_epochs=1))
bad("err.sampler.sequential_num_records_zero", lambda: pg.SequentialSampler(0))
bad("err.sampler.num_epochs_zero", lambda: sampler(3, num_epochs=0))
bad("err.sampler.shuffle_without_seed", lambda: sampler(3, num_epochs=1, shuffle=True))
bad("err.sampler.seed_negative", lambda: sampler(4, num_epochs=1, shuffle=True, seed=-5))
bad("err.sampler.seed_2_32", lambda: sampler(4, num_epochs=1, shuffle=True, seed=2**32))
bad("err.sampler.seed_str", lambda: sampler(4, num_epochs=1, shuffle=True, seed="1"))
bad("err.sampler.step_past_end", lambda: sampler(3, num_epochs=1)[3])

# -- batches of elements of different structures -----------------------------------------------
bad("err.batch.dict_keys_map", lambda: M.source([{"a": 1}, {"b": 2}]).batch(2)[0])
bad(
    "err.batch.dict_keys_iter",
    lambda: M.source([{"a": 1}, {"b": 2}]).to_iter_dataset().batch(2),
)
bad("err.batch.dict_keys_three", lambda: M.source([{"a": 1}, {"a": 2}, {"b": 3}]).batch(3)[0])
bad("err.batch.tuple_lengths", lambda: M.source([(1, 2), (1, 2, 3)]).batch(2)[0])
bad("err.batch.list_lengths", lambda: M.source([[1, 2], [1, 2, 3]]).batch(2)[0])
bad(
    "err.batch.leaf_shapes",
    lambda: M.source([np.zeros(2), np.zeros(3)]).to_iter_dataset().batch(2),
)
bad(
    "err.batch.dict_leaf_shapes",
    lambda: M.source([{"a": np.zeros(2)}, {"a": np.zeros(3)}]).batch(2)[0],
)

# -- batch sizes -------------------------------------------------------------------------------
bad("err.batch_size.zero_map", lambda: M.range(4).batch(0))
bad("err.batch_size.negative_iter", lambda: M.range(4).to_iter_dataset().batch(-2))
bad("err.batch_size.transform_zero_applied", lambda: M.range(4).apply([grain.transforms.Batch(0)]))
bad(
    "err.batch_size.rebatch_zero",
    lambda: grain.experimental.RebatchIterDataset(M.range(4).batch(1).to_iter_dataset(), 0),
)
bad(
    "err.batch_size.batch_and_pad_too_many",
    lambda: grain.experimental.batch_and_pad([1, 2, 3], batch_size=2),
)
bad("err.batch.after_filter", lambda: M.range(4).filter(lambda x: True).batch(2))

# -- shard options -----------------------------------------------------------------------------
bad("err.shard.index_equals_count", lambda: grain.sharding.ShardOptions(2, 2))
bad("err.shard.index_negative", lambda: pg.ShardOptions(shard_index=-1, shard_count=3))
bad("err.shard.count_zero", lambda: grain.sharding.ShardOptions(0, 0))
bad("err.shard.count_negative", lambda: grain.sharding.ShardOptions(0, -2))

# -- seeds -------------------------------------------------------------------------------------
bad("err.seed.shuffle_negative", lambda: M.range(4).shuffle(seed=-1))
bad("err.seed.shuffle_2_32", lambda: M.range(4).shuffle(seed=2**32))
bad("err.seed.shuffle_missing", lambda: M.range(4).shuffle())
bad("err.seed.random_map_missing", lambda: M.range(4).random_map(lambda x, rng: x))

# -- transforms that are not callable; filters ------------------------------------------------
bad("err.transform.map_int", lambda: M.range(3).map(5))
bad("err.transform.map_int_iter", lambda: M.range(3).to_iter_dataset().map(5))
bad("err.transform.filter_int", lambda: M.range(3).filter(5))
bad("err.transform.apply_int", lambda: M.range(3).apply(5))
bad("err.transform.apply_str", lambda: M.range(3).apply("x"))


@case("err.filter.truthy_result_keeps")
def _():
    return list(M.range(3).filter(lambda x: "yes")), list(
        M.range(3).to_iter_dataset().filter(lambda x: x % 2)
    )


bad("err.filter.array_result", lambda: M.range(3).filter(lambda x: np.array([True, False])))

# -- indexes, slices, repeat ---------------------------------------------------------------


@case("err.getitem.past_end_wraps")
def _():
    ds = M.range(3)
    return [ds[5], ds[-5], M.source([1, 2, 3])[7], M.range(5)[1:3][5]]


bad("err.slice.step_zero", lambda: M.range(5)[::0])
bad("err.slice.not_a_slice", lambda: M.range(5).slice(3))
bad("err.repeat.zero", lambda: M.range(3).repeat(0))
bad("err.repeat.negative", lambda: M.range(3).repeat(-2))
bad("err.repeat.infinite_twice", lambda: M.range(3).repeat().repeat())
bad("err.concatenate.infinite_first", lambda: M.concatenate([M.range(3).repeat(), M.range(2)]))

# -- mixing and zipping -----------------------------------------------------------------------
bad("err.mix.zero_weight", lambda: M.mix([M.range(3), M.range(3)], [1, 0]))
bad("err.mix.empty_dataset", lambda: M.mix([M.range(0), M.range(3)]))
bad("err.zip.unequal_lengths", lambda: grain.experimental.ZipMapDataset([M.range(2), M.range(3)]))
bad("err.zip.no_parents", lambda: grain.experimental.ZipMapDataset([]))

# -- options, loaders, iterators, states, config --------------------------------------------
bad("err.read_options.threads_negative", lambda: grain.ReadOptions(num_threads=-1))
bad("err.read_options.buffer_negative", lambda: grain.ReadOptions(prefetch_buffer_size=-1))
bad(
    "err.thread_prefetch.buffer_negative",
    lambda: grain.experimental.ThreadPrefetchIterDataset(
        M.range(3).to_iter_dataset(), prefetch_buffer_size=-1
    ),
)
bad(
    "err.limit.count_zero",
    lambda: grain.experimental.LimitIterDataset(M.range(3).to_iter_dataset(), count=0),
)
bad(
    "err.dl.worker_count_negative",
    lambda: pg.DataLoader(data_source=[1, 2], sampler=sampler(2, num_epochs=1), worker_count=-1),
)


@case("err.iterator.next_after_close")
def _():
    it = iter(M.range(3).to_iter_dataset())
    take(it, 1)
    it.close()
    return next(it)


@case("err.state.next_index_past_end")
def _():
    it = iter(M.range(3).to_iter_dataset())
    it.set_state({"next_index": 10})
    return next(it)


@case("err.config.unknown_option")
def _():
    grain.config.update("no_such_option_err", 1)


bad("err.source.range_past_end", lambda: grain.sources.RangeDataSource(0, 3, 1)[5])
