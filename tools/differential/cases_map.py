"""MapDataset: constructors, transformations, indexing, length, iteration."""

from __future__ import annotations

import numpy as np

import grain
import grain.python as pg
from _registry import L, case, expr, first, logged_or_warned, types_of

# ------------------------------------------------------------------ construction
expr("map.range.stop", "list(grain.MapDataset.range(5))")
expr("map.range.start_stop", "list(grain.MapDataset.range(3, 8))")
expr("map.range.step", "list(grain.MapDataset.range(1, 10, 3))")
expr("map.range.negative_step", "list(grain.MapDataset.range(5, 0, -1))")
expr("map.range.empty", "[len(grain.MapDataset.range(0)), list(grain.MapDataset.range(0))]")
expr(
    "map.range.start_gt_stop",
    "[len(grain.MapDataset.range(5, 2)), list(grain.MapDataset.range(5, 2))]",
)
expr("map.range.element_type", "type(grain.MapDataset.range(5)[2]).__name__")
expr("map.source.list", "list(grain.MapDataset.source([1, 2, 3, 4, 5]))")
expr("map.source.tuple", "list(grain.MapDataset.source((1, 'a', None, 2.5)))")
expr("map.source.string", "list(grain.MapDataset.source('abc'))")
expr("map.source.range_obj", "list(grain.MapDataset.source(range(3)))")
expr("map.source.numpy", "list(grain.MapDataset.source(np.arange(4)))")
expr("map.source.dicts", "list(grain.MapDataset.source([{'a': 1}, {'a': 2}]))")
expr(
    "map.source.empty_list", "[len(grain.MapDataset.source([])), list(grain.MapDataset.source([]))]"
)
expr(
    "map.source.range_data_source",
    "list(grain.MapDataset.source(grain.sources.RangeDataSource(0, 10, 2)))",
)


@case("map.source.custom_random_access")
def _():
    class Src(pg.RandomAccessDataSource):
        def __init__(self):
            self._d = [10, 20, 30]

        def __getitem__(self, i):
            return self._d[i]

        def __len__(self):
            return len(self._d)

    return list(grain.MapDataset.source(Src()).map(lambda x: x + 1))


@case("map.source.plain_getitem_len")
def _():
    class Src:
        def __getitem__(self, i):
            return i * i

        def __len__(self):
            return 4

    return list(grain.MapDataset.source(Src()))


# ------------------------------------------------------------------ indexing
expr("map.getitem.int", "grain.MapDataset.range(10)[3]")
expr("map.getitem.negative", "grain.MapDataset.range(10)[-1]")
expr("map.getitem.negative_far", "grain.MapDataset.range(10)[-11]")
expr("map.getitem.past_len", "grain.MapDataset.range(10)[13]")
expr("map.getitem.huge", "grain.MapDataset.range(10)[10**12 + 7]")
expr("map.getitem.np_int", "grain.MapDataset.range(10)[np.int64(4)]")
expr("map.getitem.source_past_len", "grain.MapDataset.source([1, 2, 3])[4]")
expr("map.getitem.empty", "grain.MapDataset.range(0)[0]")
expr("map.getitem.slice", "list(grain.MapDataset.range(10)[2:8:2])")
expr(
    "map.getitem.slice_type",
    "[isinstance(grain.MapDataset.range(10)[2:5], grain.MapDataset), isinstance(grain.MapDataset.range(10)[2:5], grain.IterDataset)]",
)
expr("map.getitem.slice_negative", "list(grain.MapDataset.range(10)[-3:])")
expr("map.getitem.slice_reverse", "list(grain.MapDataset.range(10)[::-1])")
expr("map.getitem.slice_reverse_step2", "list(grain.MapDataset.range(10)[8:1:-2])")
expr("map.getitem.slice_out_of_range", "list(grain.MapDataset.range(10)[5:100])")
expr(
    "map.getitem.slice_empty",
    "[len(grain.MapDataset.range(10)[7:3]), list(grain.MapDataset.range(10)[7:3])]",
)
expr("map.getitem.slice_of_slice", "list(grain.MapDataset.range(20)[2:18][::3][1:])")
expr("map.getitem.slice_len", "len(grain.MapDataset.range(10)[1:9:3])")
expr("map.getitem.slice_index_past_len", "grain.MapDataset.range(10)[2:5][4]")
expr("map.getitem.list_of_indices", "list(grain.MapDataset.range(10)[[1, 3, 5]])")
expr("map.slice.method", "list(grain.MapDataset.range(10).slice(slice(1, 7, 2)))")
expr("map.slice.method_negative", "list(grain.MapDataset.range(10).slice(slice(-4, None)))")
expr("map.slice.list_of_indices", "list(grain.MapDataset.range(10).slice([0, 2, 9]))")
expr("map.slice.range_obj", "list(grain.MapDataset.range(10).slice(range(2, 5)))")
expr("map.slice.numpy_indices", "list(grain.MapDataset.range(10).slice(np.array([4, 1])))")

# ------------------------------------------------------------------ len / iteration
expr("map.len.range", "len(grain.MapDataset.range(7))")
expr(
    "map.len.batch",
    "[len(grain.MapDataset.range(7).batch(3)), len(grain.MapDataset.range(7).batch(3, drop_remainder=True))]",
)
expr("map.len.repeat", "len(grain.MapDataset.range(7).repeat(3))")
expr("map.len.repeat_infinite", "len(grain.MapDataset.range(7).repeat()) == sys.maxsize")
expr("map.len.filter", "len(grain.MapDataset.range(7).filter(lambda x: x > 3))")
expr("map.iter.type", "[c.__name__ for c in type(iter(grain.MapDataset.range(3))).__mro__][-4:]")
expr(
    "map.iter.is_dataset_iterator",
    "isinstance(iter(grain.MapDataset.range(3)), grain.DatasetIterator)",
)
expr("map.iter.filter_skips_none", "list(grain.MapDataset.range(10).filter(lambda x: x % 3 == 0))")
expr(
    "map.iter.map_returning_none",
    "list(grain.MapDataset.range(5).map(lambda x: None if x % 2 else x))",
)
expr(
    "map.isinstance",
    "[isinstance(grain.MapDataset.range(3), grain.MapDataset), isinstance(grain.MapDataset.range(3), grain.IterDataset)]",
)
expr(
    "map.iter.twice_same",
    "[list(d) == list(d) for d in [grain.MapDataset.range(5).map(lambda x: x * 2)]]",
)

# ------------------------------------------------------------------ map family
expr("map.map.lambda", "list(grain.MapDataset.range(5).map(lambda x: x + 10))")


@case("map.map.transform_class")
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 100

    return list(grain.MapDataset.range(3).map(Plus()))


@case("map.map.pg_map_transform")
def _():
    class Plus(pg.MapTransform):
        def map(self, x):
            return x * 3

    return list(grain.MapDataset.range(3).map(Plus()))


expr("map.map.getitem_after_map", "grain.MapDataset.range(5).map(lambda x: x * x)[3]")
expr(
    "map.map_with_index.lambda",
    "list(grain.MapDataset.source(['a', 'b', 'c', 'd']).map_with_index(lambda i, x: x + str(i)))",
)
expr(
    "map.map_with_index.index_past_len",
    "grain.MapDataset.range(3).map_with_index(lambda i, x: (i, x))[7]",
)


@case("map.map_with_index.transform_class")
def _():
    class T(grain.transforms.MapWithIndex):
        def map_with_index(self, i, x):
            return i * 10 + x

    return list(grain.MapDataset.range(4).map_with_index(T()))


@case("map.map_with_index.after_shuffle_indices")
def _():
    ds = grain.MapDataset.range(6).shuffle(seed=3).map_with_index(lambda i, x: i)
    return list(ds)


@case("map.random_map.deterministic")
def _():
    ds = grain.MapDataset.range(8).random_map(lambda x, rng: int(rng.integers(0, 1000)), seed=7)
    a, b = list(ds), list(ds)
    return {"same": a == b, "in_range": all(0 <= v < 1000 for v in a), "n": len(a)}


@case("map.random_map.rng_type")
def _():
    ds = grain.MapDataset.range(2).random_map(lambda x, rng: type(rng).__name__, seed=1)
    return list(ds)


@case("map.random_map.with_ds_seed")
def _():
    ds = grain.MapDataset.range(8).seed(5).random_map(lambda x, rng: float(rng.random()))
    return {"n": len(list(ds)), "same": list(ds) == list(ds)}


@case("map.random_map.no_seed")
def _():
    ds = grain.MapDataset.range(4).random_map(lambda x, rng: float(rng.random()))
    return len(list(ds))


@case("map.random_map.different_per_element")
def _():
    ds = grain.MapDataset.range(20).random_map(lambda x, rng: int(rng.integers(0, 2**31)), seed=0)
    return len(set(ds)) > 15


@case("map.random_map.differs_across_epochs")
def _():
    ds = grain.MapDataset.range(5).random_map(lambda x, rng: int(rng.integers(0, 2**31)), seed=0)
    return [ds[i] == ds[i + 5] for i in range(5)]


@case("map.random_map.transform_class")
def _():
    class R(grain.transforms.RandomMap):
        def random_map(self, x, rng):
            return x + int(rng.integers(0, 1))

    return list(grain.MapDataset.range(4).random_map(R(), seed=1))


@case("map.random_map.explicit_seed_overrides_ds_seed")
def _():
    f = lambda x, rng: int(rng.integers(0, 2**31))  # noqa: E731
    a = list(grain.MapDataset.range(6).seed(1).random_map(f, seed=9))
    b = list(grain.MapDataset.range(6).seed(2).random_map(f, seed=9))
    return a == b


@case("map.seed.changes_shuffle")
def _():
    a = list(grain.MapDataset.range(20).seed(1).shuffle())
    b = list(grain.MapDataset.range(20).seed(2).shuffle())
    c = list(grain.MapDataset.range(20).seed(1).shuffle())
    return {"a_ne_b": a != b, "a_eq_c": a == c, "perm": sorted(a) == list(range(20))}


@case("map.seed.two_shuffles_differ")
def _():
    ds = grain.MapDataset.range(30).seed(4)
    a = list(ds.shuffle())
    b = list(ds.map(lambda x: x).shuffle())
    return a != b


# ------------------------------------------------------------------ filter
expr(
    "map.filter.getitem_none",
    "[grain.MapDataset.range(5).filter(lambda x: x % 2 == 0)[i] for i in range(5)]",
)
expr("map.filter.list", "list(grain.MapDataset.range(5).filter(lambda x: x % 2 == 0))")


@case("map.filter.transform_class")
def _():
    class Even(grain.transforms.Filter):
        def filter(self, x):
            return x % 2 == 0

    return list(grain.MapDataset.range(7).filter(Even()))


@case("map.filter.pg_filter_transform")
def _():
    class Odd(pg.FilterTransform):
        def filter(self, x):
            return x % 2 == 1

    return list(grain.MapDataset.range(7).filter(Odd()))


expr("map.filter.truthy_values", "list(grain.MapDataset.range(6).filter(lambda x: x % 3))")
expr(
    "map.filter.then_map",
    "list(grain.MapDataset.range(6).filter(lambda x: x > 2).map(lambda x: -x))",
)
expr(
    "map.filter.to_iter_allow_nones",
    "list(grain.MapDataset.range(5).filter(lambda x: x % 2 == 0).to_iter_dataset(allow_nones=True))",
)


@case("map.filter.warns_when_mostly_filtered", isolated=True)
def _():
    ds = grain.MapDataset.range(3000).filter(lambda x: x == 0).to_iter_dataset()
    return logged_or_warned(lambda: list(ds))


# ------------------------------------------------------------------ batch
@case("map.batch.basic")
def _():
    return list(grain.MapDataset.range(5).batch(2))


@case("map.batch.types")
def _():
    return types_of(list(grain.MapDataset.range(5).batch(2)))


expr("map.batch.drop_remainder", "list(grain.MapDataset.range(5).batch(2, drop_remainder=True))")
expr("map.batch.exact", "list(grain.MapDataset.range(6).batch(3, drop_remainder=True))")
expr("map.batch.larger_than_len", "list(grain.MapDataset.range(3).batch(10))")
expr(
    "map.batch.larger_than_len_drop",
    "[len(grain.MapDataset.range(3).batch(10, drop_remainder=True)), list(grain.MapDataset.range(3).batch(10, drop_remainder=True))]",
)
expr("map.batch.batch_fn", "list(grain.MapDataset.range(5).batch(2, batch_fn=lambda xs: sum(xs)))")
expr(
    "map.batch.batch_fn_receives",
    "list(grain.MapDataset.range(4).batch(2, batch_fn=lambda xs: type(xs).__name__))",
)
expr("map.batch.getitem", "grain.MapDataset.range(7).batch(3)[2]")
expr("map.batch.getitem_past_len", "grain.MapDataset.range(7).batch(3)[3]")
expr("map.batch.getitem_negative", "grain.MapDataset.range(7).batch(3)[-1]")


@case("map.batch.dict_tree")
def _():
    ds = grain.MapDataset.range(4).map(lambda x: {"a": x, "b": (x, np.float32(x) / 2)})
    b = ds.batch(2)[0]
    return {"value": b, "types": types_of(b)}


@case("map.batch.arrays")
def _():
    ds = grain.MapDataset.range(3).map(lambda x: np.full((2,), x, dtype=np.int32))
    b = ds.batch(3)[0]
    return {"value": b, "types": types_of(b)}


@case("map.batch.strings")
def _():
    b = grain.MapDataset.source(["a", "bb", "c"]).batch(3)[0]
    return {"value": b, "types": types_of(b)}


@case("map.batch.floats_dtype")
def _():
    return types_of(grain.MapDataset.source([1.0, 2.5]).batch(2)[0])


@case("map.batch.bools_dtype")
def _():
    return types_of(grain.MapDataset.source([True, False]).batch(2)[0])


@case("map.batch.then_batch")
def _():
    b = grain.MapDataset.range(8).batch(2).batch(2)[0]
    return {"value": b, "types": types_of(b)}


@case("map.batch.repeat_then_batch")
def _():
    return [x.tolist() for x in first(grain.MapDataset.range(3).repeat(2).batch(4), 5)]


# ------------------------------------------------------------------ shuffle
@case("map.shuffle.is_permutation")
def _():
    out = list(grain.MapDataset.range(50).shuffle(seed=42))
    return {"sorted": sorted(out) == list(range(50)), "moved": out != list(range(50))}


@case("map.shuffle.deterministic")
def _():
    a = list(grain.MapDataset.range(30).shuffle(seed=1))
    b = list(grain.MapDataset.range(30).shuffle(seed=1))
    c = list(grain.MapDataset.range(30).shuffle(seed=2))
    return {"same_seed": a == b, "other_seed_differs": a != c}


@case("map.shuffle.order_seed42", shuffled=True)
def _():
    return list(grain.MapDataset.range(10).shuffle(seed=42))


@case("map.shuffle.epochs_differ")
def _():
    ds = grain.MapDataset.range(20).shuffle(seed=3)
    e0 = [ds[i] for i in range(20)]
    e1 = [ds[i] for i in range(20, 40)]
    return {"e1_perm": sorted(e1) == list(range(20)), "differ": e0 != e1}


@case("map.shuffle.repeat_reshuffles")
def _():
    ds = grain.MapDataset.range(10).shuffle(seed=3).repeat(2)
    out = list(ds)
    return {
        "n": len(out),
        "halves_differ": out[:10] != out[10:],
        "perm": sorted(out[10:]) == list(range(10)),
    }


@case("map.shuffle.len_one")
def _():
    return list(grain.MapDataset.range(1).shuffle(seed=0))


@case("map.shuffle.len_zero")
def _():
    return [
        len(grain.MapDataset.range(0).shuffle(seed=0)),
        list(grain.MapDataset.range(0).shuffle(seed=0)),
    ]


@case("map.shuffle.seed_zero")
def _():
    return sorted(grain.MapDataset.range(5).shuffle(seed=0))


@case("map.shuffle.seed_max_uint32")
def _():
    return sorted(grain.MapDataset.range(5).shuffle(seed=2**32 - 1))


@case("map.shuffle.np_seed")
def _():
    return sorted(grain.MapDataset.range(5).shuffle(seed=np.int64(3)))


@case("map.shuffle.large_len", timeout=20)
def _():
    ds = grain.MapDataset.range(10**9).shuffle(seed=1)
    vals = [ds[i] for i in (0, 1, 10**8, 10**9 - 1)]
    return all(0 <= v < 10**9 for v in vals)


# ------------------------------------------------------------------ repeat
expr("map.repeat.two", "list(grain.MapDataset.range(3).repeat(2))")
expr("map.repeat.one", "list(grain.MapDataset.range(3).repeat(1))")
expr("map.repeat.infinite_getitem", "grain.MapDataset.range(5).repeat()[11111]")
expr("map.repeat.infinite_first", "first(grain.MapDataset.range(3).repeat(), 8)")


@case("map.repeat.reseed_each_epoch_true")
def _():
    ds = grain.MapDataset.range(4).random_map(lambda x, r: int(r.integers(0, 2**31)), seed=1)
    out = list(ds.repeat(2))
    return out[:4] != out[4:]


@case("map.repeat.reseed_each_epoch_false")
def _():
    ds = grain.MapDataset.range(4).random_map(lambda x, r: int(r.integers(0, 2**31)), seed=1)
    out = list(ds.repeat(2, reseed_each_epoch=False))
    return out[:4] == out[4:]


@case("map.repeat.shuffle_reseed_false")
def _():
    out = list(grain.MapDataset.range(10).shuffle(seed=1).repeat(2, reseed_each_epoch=False))
    return out[:10] == out[10:]


expr(
    "map.repeat.empty",
    "[len(grain.MapDataset.range(0).repeat(3)), list(grain.MapDataset.range(0).repeat(3))]",
)

# ------------------------------------------------------------------ mix / concatenate / select
expr(
    "map.mix.uniform",
    "list(grain.MapDataset.mix([grain.MapDataset.range(5), grain.MapDataset.range(7, 10)]))",
)
expr(
    "map.mix.weights",
    "list(grain.MapDataset.mix([grain.MapDataset.range(6), grain.MapDataset.range(100, 106)], weights=[2, 1]))",
)
expr(
    "map.mix.len",
    "len(grain.MapDataset.mix([grain.MapDataset.range(6), grain.MapDataset.range(100, 106)], weights=[2, 1]))",
)
expr(
    "map.mix.float_weights",
    "list(grain.MapDataset.mix([grain.MapDataset.range(4), grain.MapDataset.range(10, 14)], weights=[0.25, 0.75]))",
)


@case("map.mix.proportions")
def _():
    ds = grain.MapDataset.mix(
        [
            grain.MapDataset.range(1000).map(lambda x: 0),
            grain.MapDataset.range(1000).map(lambda x: 1),
        ],
        weights=[0.25, 0.75],
    )
    out = list(ds)
    return {"len": len(ds), "ones": sum(out), "first_100_ones": sum(out[:100])}


expr("map.mix.single", "list(grain.MapDataset.mix([grain.MapDataset.range(3)]))")
expr(
    "map.mix.three",
    "list(grain.MapDataset.mix([grain.MapDataset.range(2), grain.MapDataset.range(10, 12), grain.MapDataset.range(20, 22)]))",
)
expr(
    "map.mix.getitem_past_len",
    "grain.MapDataset.mix([grain.MapDataset.range(3), grain.MapDataset.range(10, 13)])[7]",
)
expr(
    "map.mix.repeated_len",
    "len(grain.MapDataset.mix([grain.MapDataset.range(3).repeat(), grain.MapDataset.range(5).repeat()], weights=[1, 2])) == sys.maxsize",
)
expr(
    "map.mix.tuple_input",
    "list(grain.MapDataset.mix((grain.MapDataset.range(2), grain.MapDataset.range(5, 7))))",
)
expr(
    "map.concatenate.basic",
    "list(grain.MapDataset.concatenate([grain.MapDataset.range(3), grain.MapDataset.range(3, 8)]))",
)
expr(
    "map.concatenate.len",
    "len(grain.MapDataset.concatenate([grain.MapDataset.range(3), grain.MapDataset.range(3, 8)]))",
)
expr("map.concatenate.single", "list(grain.MapDataset.concatenate([grain.MapDataset.range(3)]))")
expr(
    "map.concatenate.with_empty",
    "list(grain.MapDataset.concatenate([grain.MapDataset.range(0), grain.MapDataset.range(2)]))",
)
expr(
    "map.concatenate.getitem_second_epoch",
    "grain.MapDataset.concatenate([grain.MapDataset.range(3), grain.MapDataset.range(10, 12)])[6]",
)


@case("map.select_from_datasets.basic")
def _():
    class Sel(grain.transforms.DatasetSelectionMap):
        def __len__(self):
            return 6

        def __getitem__(self, index):
            return (index % 2, index // 2)

    ds = grain.MapDataset.select_from_datasets(
        [grain.MapDataset.range(3), grain.MapDataset.range(10, 13)], Sel()
    )
    return {"len": len(ds), "items": list(ds)}


@case("map.select_from_datasets.index_past_component")
def _():
    class Sel(grain.transforms.DatasetSelectionMap):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return (0, index + 5)

    ds = grain.MapDataset.select_from_datasets([grain.MapDataset.range(3)], Sel())
    return list(ds)


@case("map.select_from_datasets.pg_selection_map")
def _():
    class Sel(pg.DatasetSelectionMap):
        def __len__(self):
            return 3

        def __getitem__(self, index):
            return (0, 2 - index)

    return list(grain.MapDataset.select_from_datasets([grain.MapDataset.range(3)], Sel()))


# ------------------------------------------------------------------ apply / pipe
expr(
    "map.pipe.func",
    "list(grain.MapDataset.range(4).pipe(lambda ds, k: ds.map(lambda x: x * k), 3))",
)
expr(
    "map.pipe.kwargs",
    "list(grain.MapDataset.range(10).pipe(grain.experimental.WindowShuffleMapDataset, window_size=1, seed=0))",
)
expr("map.pipe.returns_anything", "grain.MapDataset.range(4).pipe(len)")


@case("map.apply.list_of_transforms")
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 1

    class Even(grain.transforms.Filter):
        def filter(self, x):
            return x % 2 == 0

    ds = grain.MapDataset.range(6).apply([Plus(), Even()])
    return {"filtered": list(ds), "batched": [b.tolist() for b in ds.to_iter_dataset().batch(2)]}


@case("map.apply.filter_then_batch")
def _():
    class Even(grain.transforms.Filter):
        def filter(self, x):
            return x % 2 == 0

    return list(grain.MapDataset.range(6).apply([Even(), grain.transforms.Batch(2)]))


@case("map.apply.single_transform")
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 1

    return list(grain.MapDataset.range(3).apply(Plus()))


@case("map.apply.random_and_index")
def _():
    class R(grain.transforms.RandomMap):
        def random_map(self, x, rng):
            return x

    class I(grain.transforms.MapWithIndex):  # noqa: E742
        def map_with_index(self, i, x):
            return (i, x)

    return list(grain.MapDataset.range(3).seed(1).apply([R(), I()]))


@case("map.apply.flat_map")
def _():
    class Twice(grain.experimental.FlatMapTransform):
        max_fan_out = 2

        def flat_map(self, x):
            return [x, x]

    return list(grain.MapDataset.range(3).apply([Twice()]))


# ------------------------------------------------------------------ to_iter_dataset / parents / misc
expr("map.to_iter_dataset.basic", "list(grain.MapDataset.range(5).to_iter_dataset())")
expr(
    "map.to_iter_dataset.read_options",
    "list(grain.MapDataset.range(5).map(lambda x: x * 2).to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=3)))",
)
expr(
    "map.to_iter_dataset.zero_threads",
    "list(grain.MapDataset.range(5).to_iter_dataset(grain.ReadOptions(num_threads=0)))",
)
expr(
    "map.to_iter_dataset.type",
    "isinstance(grain.MapDataset.range(5).to_iter_dataset(), grain.IterDataset)",
)
expr(
    "map.to_iter_dataset.infinite_first",
    "first(grain.MapDataset.range(3).repeat().to_iter_dataset(), 7)",
)
expr("map.parents.source", "len(grain.MapDataset.range(3).parents)")
expr(
    "map.parents.map",
    "[isinstance(p, grain.MapDataset) for p in grain.MapDataset.range(3).map(lambda x: x).parents]",
)
expr(
    "map.parents.mix",
    "len(grain.MapDataset.mix([grain.MapDataset.range(3), grain.MapDataset.range(3)]).parents)",
)
expr(
    "map.iter_through_list_and_len",
    "(len(grain.MapDataset.range(4).map(str)), list(grain.MapDataset.range(4).map(str)))",
)
expr("map.slice_then_shuffle", "sorted(grain.MapDataset.range(10)[2:6].shuffle(seed=1))")
expr("map.shuffle_then_slice_len", "len(grain.MapDataset.range(10).shuffle(seed=1)[2:6])")


@case("map.subclass_custom")
def _():
    class Doubler(grain.MapDataset):
        def __init__(self, parent):
            super().__init__(parent)
            self._p = parent

        def __len__(self):
            return len(self._p)

        def __getitem__(self, index):
            if isinstance(index, slice):
                return self.slice(index)
            return self._p[index] * 2

    ds = Doubler(grain.MapDataset.range(4))
    return {"list": list(ds), "mapped": list(ds.map(lambda x: x + 1)), "item": ds[5]}


@case("map.pickle_roundtrip")
def _():
    import pickle

    ds = grain.MapDataset.range(6).shuffle(seed=1).batch(2)
    return [x.tolist() for x in pickle.loads(pickle.dumps(ds))] == [x.tolist() for x in ds]


@case("map.iterator_get_state_shape")
def _():
    from _registry import state_shape

    it = iter(grain.MapDataset.range(6))
    next(it)
    return state_shape(it.get_state())


@case("map.iterator_state_values")
def _():
    it = iter(grain.MapDataset.range(6).to_iter_dataset())
    next(it)
    next(it)
    return it.get_state()


@case("map.len_of_nested")
def _():
    ds = grain.MapDataset.range(100).shuffle(seed=0).map(str)[10:60].batch(7)
    return len(ds)


_ = L  # exported helpers are used in expr strings
