"""grain.experimental: the extra datasets, packing, prefetch, options, helpers."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import grain
import grain.python as pg
from _registry import L, case, expr, first, logged_or_warned, sampler, state_shape, take, types_of
from cases_iter import _resume_case, resume


def gx() -> Any:
    return grain.experimental


def _it(n: int = 6) -> Any:
    return grain.MapDataset.range(n).to_iter_dataset()


def _seqs(lengths: list[int], key: str = "tokens") -> Any:
    """An IterDataset of {key: arange-like int32 arrays} of the given lengths."""
    els = [{key: np.arange(1, n + 1, dtype=np.int32) + 10 * i} for i, n in enumerate(lengths)]
    return grain.MapDataset.source(els).to_iter_dataset()


# ------------------------------------------------------------------ Interleave
@case("exp.interleave.basic")
def _():
    dss = [grain.MapDataset.range(i * 10, i * 10 + 3).to_iter_dataset() for i in range(3)]
    return list(gx().InterleaveIterDataset(dss, cycle_length=2))


@case("exp.interleave.map_datasets")
def _():
    dss = [grain.MapDataset.range(i * 10, i * 10 + 2) for i in range(3)]
    return list(gx().InterleaveIterDataset(dss, cycle_length=3))


@case("exp.interleave.cycle_length_1")
def _():
    dss = [grain.MapDataset.range(i * 10, i * 10 + 2).to_iter_dataset() for i in range(3)]
    return list(gx().InterleaveIterDataset(dss, cycle_length=1))


@case("exp.interleave.cycle_longer_than_inputs")
def _():
    dss = [grain.MapDataset.range(i * 10, i * 10 + 2).to_iter_dataset() for i in range(2)]
    return list(gx().InterleaveIterDataset(dss, cycle_length=5))


@case("exp.interleave.uneven")
def _():
    dss = [
        grain.MapDataset.range(n).map(lambda x, n=n: n * 100 + x).to_iter_dataset()
        for n in (1, 4, 2)
    ]
    return list(gx().InterleaveIterDataset(dss, cycle_length=2))


@case("exp.interleave.map_dataset_of_datasets")
def _():
    dss = grain.MapDataset.range(3).map(
        lambda i: grain.MapDataset.range(i * 10, i * 10 + 2).to_iter_dataset()
    )
    return list(gx().InterleaveIterDataset(dss, cycle_length=2))


_resume_case(
    "exp.interleave.resume",
    lambda: grain.experimental.InterleaveIterDataset(
        [grain.MapDataset.range(i * 10, i * 10 + 4).to_iter_dataset() for i in range(3)],
        cycle_length=2,
    ),
    5,
)


# ------------------------------------------------------------------ WindowShuffle
@case("exp.window_shuffle.map_window_perm")
def _():
    out = list(gx().WindowShuffleMapDataset(grain.MapDataset.range(12), window_size=4, seed=1))
    return {
        "perm": sorted(out) == list(range(12)),
        "windows_kept": [sorted(out[i : i + 4]) for i in range(0, 12, 4)],
    }


@case("exp.window_shuffle.map_order", shuffled=True)
def _():
    return list(gx().WindowShuffleMapDataset(grain.MapDataset.range(8), window_size=4, seed=1))


expr(
    "exp.window_shuffle.map_len",
    "len(grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(10), window_size=4, seed=1))",
)
expr(
    "exp.window_shuffle.map_window_1",
    "list(grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(5), window_size=1, seed=1))",
)


@case("exp.window_shuffle.iter_perm")
def _():
    out = list(gx().WindowShuffleIterDataset(_it(20), window_size=5, seed=3))
    return {"perm": sorted(out) == list(range(20)), "moved": out != list(range(20))}


@case("exp.window_shuffle.iter_window_larger_than_data")
def _():
    return sorted(gx().WindowShuffleIterDataset(_it(3), window_size=100, seed=3))


@case("exp.window_shuffle.iter_deterministic")
def _():
    mk = lambda: list(gx().WindowShuffleIterDataset(_it(20), window_size=5, seed=3))  # noqa: E731
    return mk() == mk()


@case("exp.window_shuffle.iter_resume")
def _():
    r = resume(gx().WindowShuffleIterDataset(_it(15), window_size=4, seed=3), 6)
    return {
        "resumed_equal": r["resumed_equal"],
        "state_shape": r["state_shape"],
        "n": len(r["head"]) + len(r["rest"]),
    }


# ------------------------------------------------------------------ ThreadPrefetch
expr(
    "exp.thread_prefetch.basic",
    "list(grain.experimental.ThreadPrefetchIterDataset(grain.MapDataset.range(8).to_iter_dataset(), prefetch_buffer_size=3))",
)
expr(
    "exp.thread_prefetch.buffer_zero",
    "list(grain.experimental.ThreadPrefetchIterDataset(grain.MapDataset.range(4).to_iter_dataset(), prefetch_buffer_size=0))",
)
expr(
    "exp.thread_prefetch.iterator_type",
    "isinstance(iter(grain.experimental.ThreadPrefetchIterDataset(grain.MapDataset.range(4).to_iter_dataset(), prefetch_buffer_size=2)), grain.DatasetIterator)",
)


@case("exp.thread_prefetch.resume")
def _():
    ds = gx().ThreadPrefetchIterDataset(_it(10).map(lambda x: x * 3), prefetch_buffer_size=4)
    return resume(ds, 4)


@case("exp.thread_prefetch.error_propagates")
def _():
    def boom(x):
        if x == 2:
            raise KeyError("boom")
        return x

    ds = gx().ThreadPrefetchIterDataset(_it(5).map(boom), prefetch_buffer_size=2)
    it = iter(ds)
    got = [next(it), next(it)]
    try:
        next(it)
    except KeyError as e:
        return {"got": got, "raised": type(e).__name__}
    return {"got": got, "raised": None}


@case("exp.thread_prefetch.iterator_class")
def _():
    it = gx().ThreadPrefetchDatasetIterator(iter(_it(5)), prefetch_buffer_size=2)
    return list(it)


expr(
    "exp.multithread_prefetch.basic",
    "sorted(grain.experimental.multithread_prefetch(grain.MapDataset.range(10).to_iter_dataset(), num_threads=2, buffer_size=2))",
)
expr(
    "exp.multithread_prefetch.order",
    "list(grain.experimental.multithread_prefetch(grain.MapDataset.range(10).to_iter_dataset(), num_threads=2, buffer_size=2))",
)
expr(
    "exp.multithread_prefetch.zero_threads",
    "list(grain.experimental.multithread_prefetch(grain.MapDataset.range(5).to_iter_dataset(), num_threads=0, buffer_size=2))",
)
expr(
    "exp.multithread_prefetch.sequential_slice",
    "list(grain.experimental.multithread_prefetch(grain.MapDataset.range(10).to_iter_dataset(), num_threads=2, buffer_size=2, sequential_slice=True))",
)

# ------------------------------------------------------------------ Zip
expr(
    "exp.zip.map",
    "list(grain.experimental.ZipMapDataset([grain.MapDataset.range(3), grain.MapDataset.range(10, 13)]))",
)
expr(
    "exp.zip.map_len_unequal",
    "len(grain.experimental.ZipMapDataset([grain.MapDataset.range(3), grain.MapDataset.range(10, 15)]))",
)
expr(
    "exp.zip.map_three",
    "grain.experimental.ZipMapDataset([grain.MapDataset.range(3), grain.MapDataset.range(3), grain.MapDataset.range(3)])[1]",
)
expr(
    "exp.zip.iter",
    "list(grain.experimental.ZipIterDataset([grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset.range(10, 13).to_iter_dataset()]))",
)
expr(
    "exp.zip.iter_strict_unequal",
    "list(grain.experimental.ZipIterDataset([grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset.range(10, 15).to_iter_dataset()]))",
)
expr(
    "exp.zip.iter_strict_unequal_other_side",
    "list(grain.experimental.ZipIterDataset([grain.MapDataset.range(5).to_iter_dataset(), grain.MapDataset.range(10, 13).to_iter_dataset()]))",
)
expr(
    "exp.zip.iter_not_strict_unequal",
    "list(grain.experimental.ZipIterDataset([grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset.range(10, 15).to_iter_dataset()], strict=False))",
)
expr(
    "exp.zip.iter_single",
    "list(grain.experimental.ZipIterDataset([grain.MapDataset.range(2).to_iter_dataset()]))",
)
expr("exp.zip.map_single", "list(grain.experimental.ZipMapDataset([grain.MapDataset.range(2)]))")


@case("exp.zip.iter_strict_partial_then_raise")
def _():
    ds = gx().ZipIterDataset([_it(2), _it(4)])
    it = iter(ds)
    got = take(it, 2)
    try:
        next(it)
        return {"got": got, "third": "value"}
    except StopIteration:
        return {"got": got, "third": "StopIteration"}


_resume_case(
    "exp.zip.iter_resume",
    lambda: grain.experimental.ZipIterDataset(
        [
            grain.MapDataset.range(6).to_iter_dataset(),
            grain.MapDataset.range(10, 16).to_iter_dataset(),
        ]
    ),
    2,
)

# ------------------------------------------------------------------ FlatMap


def _fan(n: int, out: int) -> Any:
    class Split(grain.experimental.FlatMapTransform):
        max_fan_out = n

        def flat_map(self, x):
            return [x * 10 + j for j in range(out)]

    return Split()


@case("exp.flat_map.map")
def _():
    ds = gx().FlatMapMapDataset(grain.MapDataset.range(3), _fan(2, 2))
    return {"len": len(ds), "items": [ds[i] for i in range(len(ds))]}


@case("exp.flat_map.map_underfull")
def _():
    ds = gx().FlatMapMapDataset(grain.MapDataset.range(3), _fan(3, 1))
    return {"len": len(ds), "items": [ds[i] for i in range(len(ds))], "list": list(ds)}


@case("exp.flat_map.map_over_fan_out")
def _():
    ds = gx().FlatMapMapDataset(grain.MapDataset.range(3), _fan(1, 2))
    return [ds[i] for i in range(len(ds))]


@case("exp.flat_map.iter")
def _():
    return list(gx().FlatMapIterDataset(_it(3), _fan(3, 3)))


@case("exp.flat_map.iter_variable")
def _():
    class Var(grain.experimental.FlatMapTransform):
        max_fan_out = 5

        def flat_map(self, x):
            return list(range(x))

    return list(gx().FlatMapIterDataset(_it(5), Var()))


@case("exp.flat_map.iter_over_fan_out")
def _():
    return list(gx().FlatMapIterDataset(_it(3), _fan(1, 3)))


@case("exp.flat_map.iter_generator")
def _():
    class Gen(grain.experimental.FlatMapTransform):
        max_fan_out = 4

        def flat_map(self, x):
            yield from (x, x)

    return list(gx().FlatMapIterDataset(_it(3), Gen()))


@case("exp.flat_map.iter_resume")
def _():
    return resume(gx().FlatMapIterDataset(_it(4), _fan(3, 3)), 4)


@case("exp.flat_map.default_max_fan_out")
def _():
    class NoFan(grain.experimental.FlatMapTransform):
        def flat_map(self, x):
            return [x]

    return getattr(NoFan(), "max_fan_out", "<absent>")


# ------------------------------------------------------------------ Limit / Repeat / Rebatch
expr(
    "exp.limit.basic",
    "list(grain.experimental.LimitIterDataset(grain.MapDataset.range(10).to_iter_dataset(), count=3))",
)
expr(
    "exp.limit.more_than_data",
    "list(grain.experimental.LimitIterDataset(grain.MapDataset.range(3).to_iter_dataset(), count=10))",
)
expr(
    "exp.limit.positional",
    "list(grain.experimental.LimitIterDataset(grain.MapDataset.range(10).to_iter_dataset(), 2))",
)
expr(
    "exp.limit.infinite",
    "list(grain.experimental.LimitIterDataset(grain.MapDataset.range(3).repeat().to_iter_dataset(), count=7))",
)
_resume_case(
    "exp.limit.resume",
    lambda: grain.experimental.LimitIterDataset(
        grain.MapDataset.range(10).to_iter_dataset(), count=5
    ),
    2,
)
expr(
    "exp.repeat.two",
    "list(grain.experimental.RepeatIterDataset(grain.MapDataset.range(3).to_iter_dataset(), num_epochs=2))",
)
expr(
    "exp.repeat.infinite",
    "first(grain.experimental.RepeatIterDataset(grain.MapDataset.range(3).to_iter_dataset()), 8)",
)
expr(
    "exp.repeat.one",
    "list(grain.experimental.RepeatIterDataset(grain.MapDataset.range(3).to_iter_dataset(), num_epochs=1))",
)
expr(
    "exp.repeat.empty_infinite",
    "first(grain.experimental.RepeatIterDataset(grain.MapDataset.range(0).to_iter_dataset()), 3)",
    timeout=10,
)
_resume_case(
    "exp.repeat.resume",
    lambda: grain.experimental.RepeatIterDataset(
        grain.MapDataset.range(3).to_iter_dataset(), num_epochs=3
    ),
    4,
)


@case("exp.repeat.state_shape")
def _():
    it = iter(gx().RepeatIterDataset(_it(3), num_epochs=2))
    take(it, 4)
    return {"state_shape": state_shape(it.get_state()), "state": it.get_state()}


@case("exp.rebatch.basic")
def _():
    ds = gx().RebatchIterDataset(_it(10).batch(3), batch_size=4)
    return [b.tolist() for b in ds]


@case("exp.rebatch.drop_remainder")
def _():
    ds = gx().RebatchIterDataset(_it(10).batch(3), batch_size=4, drop_remainder=True)
    return [b.tolist() for b in ds]


@case("exp.rebatch.dict")
def _():
    ds = _it(6).map(lambda x: {"a": x, "b": np.array([x, -x])}).batch(4)
    out = list(gx().RebatchIterDataset(ds, batch_size=3))
    return {"value": out, "types": types_of(out)}


@case("exp.rebatch.resume")
def _():
    return resume(gx().RebatchIterDataset(_it(11).batch(2), batch_size=3), 2)


# ------------------------------------------------------------------ packing
def _ff(lengths: list[int], seq_len: int, bins: int, **kw: Any) -> Any:
    return gx().FirstFitPackIterDataset(
        _seqs(lengths),
        length_struct={"tokens": seq_len},
        num_packing_bins=bins,
        shuffle_bins=False,
        **kw,
    )


@case("exp.pack.first_fit.basic")
def _():
    return list(_ff([3, 2, 4, 1], 5, 2))


@case("exp.pack.first_fit.keys_and_types")
def _():
    el = next(iter(_ff([3, 2], 5, 1)))
    return types_of(el)


@case("exp.pack.first_fit.one_bin")
def _():
    return list(_ff([2, 2, 2, 2], 4, 1))


@case("exp.pack.first_fit.exact_fill")
def _():
    return list(_ff([5, 5], 5, 1))


@case("exp.pack.first_fit.too_long")
def _():
    return list(_ff([3, 9, 2], 5, 2))


@case("exp.pack.first_fit.max_sequences_per_bin")
def _():
    return list(_ff([1, 1, 1, 1], 10, 1, max_sequences_per_bin=2))


@case("exp.pack.first_fit.shuffle_bins_default", shuffled=True)
def _():
    ds = gx().FirstFitPackIterDataset(
        _seqs([3, 2, 4, 1, 2]), length_struct={"tokens": 5}, num_packing_bins=3
    )
    return [el["tokens"].tolist() for el in ds]


@case("exp.pack.first_fit.meta_features")
def _():
    els = [
        {"tokens": np.arange(n, dtype=np.int32), "id": np.int32(i)} for i, n in enumerate([2, 3])
    ]
    ds = gx().FirstFitPackIterDataset(
        grain.MapDataset.source(els).to_iter_dataset(),
        length_struct={"tokens": 6, "id": 2},
        num_packing_bins=1,
        shuffle_bins=False,
        meta_features=["id"],
    )
    return list(ds)


@case("exp.pack.first_fit.two_features")
def _():
    els = [
        {"inputs": np.arange(n, dtype=np.int32), "targets": np.arange(n + 1, dtype=np.int32)}
        for n in [2, 3, 1]
    ]
    ds = gx().FirstFitPackIterDataset(
        grain.MapDataset.source(els).to_iter_dataset(),
        length_struct={"inputs": 4, "targets": 5},
        num_packing_bins=2,
        shuffle_bins=False,
    )
    return list(ds)


@case("exp.pack.first_fit.resume")
def _():
    return resume(_ff([3, 2, 4, 1, 2, 3, 1], 5, 2), 2)


@case("exp.pack.best_fit.basic")
def _():
    ds = gx().BestFitPackIterDataset(
        _seqs([3, 2, 4, 1]), length_struct={"tokens": 5}, num_packing_bins=2, shuffle_bins=False
    )
    return list(ds)


@case("exp.pack.best_fit.too_long")
def _():
    ds = gx().BestFitPackIterDataset(
        _seqs([3, 7]), length_struct={"tokens": 5}, num_packing_bins=2, shuffle_bins=False
    )
    return list(ds)


@case("exp.pack.best_fit.resume")
def _():
    ds = gx().BestFitPackIterDataset(
        _seqs([3, 2, 4, 1, 2, 3]),
        length_struct={"tokens": 5},
        num_packing_bins=2,
        shuffle_bins=False,
    )
    return resume(ds, 1)


@case("exp.pack.concat_then_split.basic")
def _():
    ds = gx().ConcatThenSplitIterDataset(_seqs([3, 4, 2]), length_struct={"tokens": 4})
    return list(ds)


@case("exp.pack.concat_then_split.no_split_full")
def _():
    ds = gx().ConcatThenSplitIterDataset(
        _seqs([4, 2, 3]), length_struct={"tokens": 4}, split_full_length_features=False
    )
    return list(ds)


@case("exp.pack.concat_then_split.bos")
def _():
    ds = gx().ConcatThenSplitIterDataset(
        _seqs([3, 3]),
        length_struct={"tokens": 4},
        bos_handling=gx().BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        bos_features=["tokens"],
        bos_token_id=99,
    )
    return list(ds)


@case("exp.pack.concat_then_split.resume")
def _():
    return resume(
        gx().ConcatThenSplitIterDataset(_seqs([3, 4, 2, 5]), length_struct={"tokens": 4}), 2
    )


@case("exp.pack.concat_then_split.scalar_feature")
def _():
    els = [{"tokens": np.arange(3, dtype=np.int32), "w": np.float32(0.5)}]
    ds = gx().ConcatThenSplitIterDataset(
        grain.MapDataset.source(els).to_iter_dataset(), length_struct={"tokens": 4, "w": 4}
    )
    return list(ds)


@case("exp.pack.and_batch_operation", timeout=20)
def _():
    els = [{"tokens": np.arange(n, dtype=np.int32)} for n in [2, 3, 1, 4]]
    loader = pg.DataLoader(
        data_source=els,
        sampler=sampler(num_records=4, num_epochs=1),
        operations=[gx().PackAndBatchOperation(length_struct={"tokens": 5}, batch_size=2)],
        worker_count=0,
    )
    return list(loader)


# ------------------------------------------------------------------ batch_and_pad
expr("exp.batch_and_pad.basic", "grain.experimental.batch_and_pad([1, 2], batch_size=4)")
expr(
    "exp.batch_and_pad.pad_value",
    "grain.experimental.batch_and_pad([1, 2], batch_size=3, pad_value=-1)",
)
expr("exp.batch_and_pad.full", "grain.experimental.batch_and_pad([1, 2, 3], batch_size=3)")
expr(
    "exp.batch_and_pad.types",
    "types_of(grain.experimental.batch_and_pad([np.ones(2, np.float32)], batch_size=2))",
)
expr(
    "exp.batch_and_pad.dict",
    "grain.experimental.batch_and_pad([{'a': 1, 'b': np.array([1, 2])}], batch_size=2)",
)
expr("exp.batch_and_pad.too_many", "grain.experimental.batch_and_pad([1, 2, 3], batch_size=2)")
expr("exp.batch_and_pad.empty", "grain.experimental.batch_and_pad([], batch_size=2)")


@case("exp.batch_and_pad.as_batch_fn")
def _():
    fn = functools.partial(gx().batch_and_pad, batch_size=3)
    return [b.tolist() for b in grain.MapDataset.range(1, 5).batch(3, batch_fn=fn)]


# ------------------------------------------------------------------ Cache
expr(
    "exp.cache.basic",
    "list(grain.experimental.CacheIterDataset(grain.MapDataset.range(5).to_iter_dataset()))",
)


@case("exp.cache.second_pass_cached")
def _():
    calls = []
    ds = _it(4).map(lambda x: calls.append(x) or x)
    cached = gx().CacheIterDataset(ds)
    a = list(cached)
    b = list(cached)
    return {"a": a, "b": b, "calls": len(calls)}


# ------------------------------------------------------------------ next index
@case("exp.next_index.get")
def _():
    it = iter(_it(10))
    take(it, 3)
    return gx().get_next_index(it)


@case("exp.next_index.set")
def _():
    it = iter(_it(10))
    gx().set_next_index(it, 7)
    return list(it)


@case("exp.next_index.map_iterator")
def _():
    it = iter(grain.MapDataset.range(10))
    take(it, 2)
    return gx().get_next_index(it)


@case("exp.next_index.on_batch_iterator")
def _():
    it = iter(_it(10).batch(2))
    next(it)
    return gx().get_next_index(it)


@case("exp.next_index.set_past_end")
def _():
    it = iter(_it(5))
    gx().set_next_index(it, 50)
    return list(it)


# ------------------------------------------------------------------ RngPool
@case("exp.rng_pool.acquire")
def _():
    pool = gx().RngPool(seed=1)
    r = pool.acquire_rng(3)
    a = int(r.integers(0, 2**31))
    pool.release_rng(r)
    r2 = pool.acquire_rng(3)
    b = int(r2.integers(0, 2**31))
    return {"type": type(r).__name__, "same_index_same_stream": a == b}


@case("exp.rng_pool.op_seed")
def _():
    pool = gx().RngPool(seed=1)
    a = int(pool.acquire_rng(0, op_seed=1).integers(0, 2**31))
    b = int(pool.acquire_rng(0, op_seed=2).integers(0, 2**31))
    return a != b


# ------------------------------------------------------------------ apply_transformations / element spec
@case("exp.apply_transformations.map")
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 1

    return list(gx().apply_transformations(grain.MapDataset.range(3), [Plus()]))


@case("exp.apply_transformations.iter_single")
def _():
    return [b.tolist() for b in gx().apply_transformations(_it(5), grain.transforms.Batch(2))]


@case("exp.element_spec.range")
def _():
    spec = gx().get_element_spec(grain.MapDataset.range(4))
    return {
        "type": type(spec).__name__,
        "shape": list(spec.shape),
        "dtype": str(np.dtype(spec.dtype)),
    }


@case("exp.element_spec.range_batch_iter")
def _():
    spec = gx().get_element_spec(grain.MapDataset.range(4).batch(2).to_iter_dataset())
    return {"shape": list(spec.shape), "dtype": str(np.dtype(spec.dtype))}


@case("exp.element_spec.map_int")
def _():
    spec = gx().get_element_spec(grain.MapDataset.source(np.arange(4, dtype=np.int32)))
    return {
        "type": type(spec).__name__,
        "shape": list(spec.shape),
        "dtype": str(np.dtype(spec.dtype)),
    }


@case("exp.element_spec.after_batch")
def _():
    ds = grain.MapDataset.source(np.zeros((6, 3), np.float32)).batch(2)
    spec = gx().get_element_spec(ds)
    return {"shape": list(spec.shape), "dtype": str(np.dtype(spec.dtype))}


@case("exp.element_spec.dict")
def _():
    ds = grain.MapDataset.source([{"a": np.zeros(2, np.int64), "b": np.float32(1)}])
    spec = gx().get_element_spec(ds.to_iter_dataset())
    return {k: {"shape": list(v.shape), "dtype": str(np.dtype(v.dtype))} for k, v in spec.items()}


@case("exp.element_spec.after_map")
def _():
    ds = grain.MapDataset.range(3).map(lambda x: np.zeros((x + 1,)))
    spec = gx().get_element_spec(ds)
    return {"shape": list(spec.shape), "dtype": str(np.dtype(spec.dtype))}


@case("exp.shape_dtype_struct")
def _():
    s = gx().ShapeDtypeStruct(shape=(2, 3), dtype=np.int32)
    return {
        "shape": list(s.shape),
        "dtype": str(np.dtype(s.dtype)),
        "eq": s == gx().ShapeDtypeStruct((2, 3), np.int32),
    }


# ------------------------------------------------------------------ performance config
@case("exp.performance_config.defaults")
def _():
    c = gx().PerformanceConfig()
    return {"mp": c.multiprocessing_options, "read": c.read_options}


@case("exp.pick_performance_config.basic", timeout=30)
def _():
    ds = grain.MapDataset.range(100).map(lambda x: np.zeros(1000, np.float32)).to_iter_dataset()
    c = gx().pick_performance_config(ds, ram_budget_mb=1024, max_workers=4, max_buffer_size=None)
    mp = c.multiprocessing_options
    return {"type": type(c).__name__, "num_workers_ok": 0 < mp.num_workers <= 4}


@case("exp.pick_performance_config.max_workers_1", timeout=30)
def _():
    ds = grain.MapDataset.range(10).to_iter_dataset()
    c = gx().pick_performance_config(ds, ram_budget_mb=1024, max_workers=1, max_buffer_size=None)
    return c.multiprocessing_options.num_workers


# ------------------------------------------------------------------ options
@case("exp.options.defaults")
def _():
    o = gx().DatasetOptions()
    return {
        "filter_warn_threshold_ratio": o.filter_warn_threshold_ratio,
        "filter_raise_threshold_ratio": o.filter_raise_threshold_ratio,
        "execution_tracking_mode": str(o.execution_tracking_mode),
        "min_shm_size": o.min_shm_size,
    }


@case("exp.options.merge")
def _():
    a = gx().DatasetOptions(filter_warn_threshold_ratio=0.6, filter_raise_threshold_ratio=0.8)
    b = gx().DatasetOptions(filter_warn_threshold_ratio=0.7)
    m = b.merge(a)
    return [m.filter_warn_threshold_ratio, m.filter_raise_threshold_ratio]


@case("exp.options.merge_none")
def _():
    a = gx().DatasetOptions(filter_warn_threshold_ratio=0.6)
    return a.merge(None).filter_warn_threshold_ratio


@case("exp.options.equality")
def _():
    return gx().DatasetOptions(min_shm_size=10) == gx().DatasetOptions(min_shm_size=10)


@case("exp.options.raise_threshold")
def _():
    ds = gx().WithOptionsIterDataset(
        grain.MapDataset.range(2000).to_iter_dataset().filter(lambda x: x % 10 == 0),
        gx().DatasetOptions(filter_raise_threshold_ratio=0.5),
    )
    return len(L(ds))


@case("exp.options.warn_disabled", isolated=True)
def _():
    ds = gx().WithOptionsIterDataset(
        grain.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x == 0),
        gx().DatasetOptions(filter_warn_threshold_ratio=None),
    )
    return logged_or_warned(lambda: list(ds))


@case("exp.options.warn_threshold_lowered", isolated=True)
def _():
    ds = gx().WithOptionsIterDataset(
        grain.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 2 == 0),
        gx().DatasetOptions(filter_warn_threshold_ratio=0.3),
    )
    return logged_or_warned(lambda: len(list(ds)))


@case("exp.options.with_options_passthrough")
def _():
    ds = gx().WithOptionsIterDataset(_it(4), gx().DatasetOptions())
    return list(ds)


@case("exp.options.stage_timing")
def _():
    o = gx().DatasetOptions(execution_tracking_mode=gx().ExecutionTrackingMode.STAGE_TIMING)
    return list(gx().WithOptionsIterDataset(_it(4).map(lambda x: x + 1), o))


expr("exp.enums.bos", "[m.name for m in grain.experimental.BOSHandling]")
expr("exp.enums.execution_tracking", "[m.name for m in grain.experimental.ExecutionTrackingMode]")


# ------------------------------------------------------------------ misc
@case("exp.assert_equal_output_after_checkpoint.ok", timeout=30)
def _():
    gx().assert_equal_output_after_checkpoint(_it(6).batch(2))
    return "ok"


@case("exp.index_shuffle.values")
def _():
    f = gx().index_shuffle
    out = [f(i, max_index=9, seed=3, rounds=4) for i in range(10)]
    return {"perm": sorted(out) == list(range(10)), "values": out}


@case("exp.elastic_iterator.basic", timeout=30)
def _():
    it = gx().ElasticIterator(
        grain.MapDataset.range(10), global_batch_size=2, shard_options=grain.sharding.NoSharding()
    )
    first_two = [b.tolist() for b in take(iter(it), 2)]
    return {"batches": first_two, "state_shape": state_shape(it.get_state())}


@case("exp.device_put.exists")
def _():
    return callable(gx().device_put)


_ = first
