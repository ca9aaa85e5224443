"""Bad inputs, found systematically.

For each argument of each public callable we try the wrong type, a negative,
zero, None, an empty sequence (whichever make sense for that argument), plus
the semantic errors the documents name (a packed sequence longer than its
target, mix weights that do not match, strict zip of unequal lengths, ...).

Each case builds the object and then consumes a little of it (`use`), so an
error raised lazily (on first iteration) is caught too; the stage at which it
was raised ("construct" or "use") is recorded.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import grain
import grain.python as pg
from _registry import Case, _register, namespace, sampler, staged, take

# ------------------------------------------------------------------ the namespace of bad cases


@functools.cache
def _extras() -> dict[str, Any]:
    ns: dict[str, Any] = {}

    def _it(n: int = 5) -> Any:
        return grain.MapDataset.range(n).to_iter_dataset()

    ns["_it"] = _it
    ns["ds"] = grain.MapDataset.range(3)

    def restored(ds: Any, state: Any, k: int = 1) -> Any:
        it = iter(ds)
        take(it, k)
        it.set_state(state)
        return it

    ns["restored"] = restored

    def seqs(lengths: list[int], key: str = "tokens") -> Any:
        els = [{key: np.arange(1, n + 1, dtype=np.int32)} for n in lengths]
        return grain.MapDataset.source(els).to_iter_dataset()

    ns["seqs"] = seqs

    def loader(n: int = 3, **kw: Any) -> Any:
        kw.setdefault("data_source", list(range(n)))
        kw.setdefault("sampler", sampler(n, num_epochs=1))
        kw.setdefault("worker_count", 0)
        return pg.DataLoader(**kw)

    ns["loader"] = loader

    try:

        class PlusOne(grain.transforms.Map):
            def map(self, x):
                return x + 1

        class KeepEven(grain.transforms.Filter):
            def filter(self, x):
                return x % 2 == 0

        ns.update(PlusOne=PlusOne, KeepEven=KeepEven)
    except AttributeError:
        pass
    try:

        class Sel(grain.transforms.DatasetSelectionMap):
            def __len__(self):
                return 3

            def __getitem__(self, i):
                return (0, i)

        ns["Sel"] = Sel
    except AttributeError:
        pass
    try:

        def fan(k: Any, out: int = 1) -> Any:
            class F(grain.experimental.FlatMapTransform):
                max_fan_out = k

                def flat_map(self, x):
                    return [x] * out

            return F()

        ns["fan"] = fan
    except AttributeError:
        pass
    return ns


def _ns() -> dict[str, Any]:
    ns = namespace()
    ns.update(_extras())
    return ns


def bad_expr(name: str, source: str, timeout: float = 10.0) -> None:
    code = compile(source, f"<case {name}>", "eval")

    def fn() -> Any:
        ns = _ns()
        return staged(lambda: eval(code, ns))

    _register(Case(name, fn, source, timeout=timeout))


def sweep(prefix: str, template: str, values: list[tuple[str, str]], timeout: float = 10.0) -> None:
    for label, src in values:
        bad_expr(f"{prefix}={label}", template.replace("{v}", src), timeout)


INT = [("neg", "-1"), ("zero", "0"), ("none", "None"), ("str", "'2'"), ("float", "2.5")]
SEED = [
    ("neg", "-1"),
    ("2**32", "2**32"),
    ("2**64", "2**64"),
    ("str", "'1'"),
    ("float", "1.5"),
    ("none", "None"),
]
FN = [("none", "None"), ("int", "5"), ("str", "'f'")]
SEQ = [("none", "None"), ("empty", "[]"), ("int", "5")]
BOOL = [("str", "'yes'"), ("none", "None")]

# ------------------------------------------------------------------ MapDataset
sweep(
    "bad.map.range.stop",
    "grain.MapDataset.range({v})",
    [("neg", "-1"), ("none", "None"), ("str", "'2'"), ("float", "2.5")],
)
sweep(
    "bad.map.range.step",
    "grain.MapDataset.range(0, 5, {v})",
    [("zero", "0"), ("none", "None"), ("str", "'1'"), ("float", "1.5")],
)
sweep(
    "bad.map.range.start",
    "grain.MapDataset.range({v}, 5)",
    [("none", "None"), ("str", "'0'"), ("float", "0.5")],
)
sweep(
    "bad.map.source",
    "grain.MapDataset.source({v})",
    [
        ("none", "None"),
        ("int", "5"),
        ("object", "object()"),
        ("dict", "{'a': 1}"),
        ("set", "{1, 2}"),
        ("generator", "(x for x in range(3))"),
        ("iterator", "iter([1, 2])"),
        ("map_dataset", "grain.MapDataset.range(3)"),
        ("iter_dataset", "_it(3)"),
    ],
)
sweep("bad.map.shuffle.seed", "grain.MapDataset.range(5).shuffle({v})", SEED)
sweep(
    "bad.map.shuffle.seed_kw",
    "grain.MapDataset.range(5).shuffle(seed={v})",
    [("np_uint32_max", "np.uint32(2**32 - 1)"), ("bool", "True")],
)
sweep("bad.map.seed", "grain.MapDataset.range(5).seed({v})", SEED)
sweep(
    "bad.map.random_map.seed",
    "grain.MapDataset.range(5).random_map(lambda x, r: x, seed={v})",
    SEED[:-1],
)
sweep("bad.map.batch.batch_size", "grain.MapDataset.range(5).batch({v})", INT)
sweep(
    "bad.map.batch.drop_remainder", "grain.MapDataset.range(5).batch(2, drop_remainder={v})", BOOL
)
sweep("bad.map.batch.batch_fn", "grain.MapDataset.range(5).batch(2, batch_fn={v})", FN[1:])
sweep(
    "bad.map.repeat.num_epochs",
    "grain.MapDataset.range(5).repeat({v})",
    [x for x in INT if x[0] != "none"],
)
sweep(
    "bad.map.repeat.infinite_twice",
    "grain.MapDataset.range(5).repeat().repeat({v})",
    [("none", "None"), ("two", "2")],
)
sweep("bad.map.repeat.reseed", "grain.MapDataset.range(5).repeat(2, reseed_each_epoch={v})", BOOL)
sweep(
    "bad.map.map",
    "grain.MapDataset.range(5).map({v})",
    FN
    + [
        ("class_not_instance", "PlusOne"),
        ("filter_transform", "KeepEven()"),
        ("batch_transform", "grain.transforms.Batch(2)"),
    ],
)
sweep(
    "bad.map.filter", "grain.MapDataset.range(5).filter({v})", FN + [("map_transform", "PlusOne()")]
)
sweep(
    "bad.map.random_map",
    "grain.MapDataset.range(5).random_map({v}, seed=1)",
    FN + [("map_transform", "PlusOne()")],
)
sweep(
    "bad.map.map_with_index",
    "grain.MapDataset.range(5).map_with_index({v})",
    FN + [("map_transform", "PlusOne()")],
)
sweep(
    "bad.map.slice",
    "grain.MapDataset.range(5).slice({v})",
    [
        ("none", "None"),
        ("int", "3"),
        ("str", "'a'"),
        ("step_zero", "slice(None, None, 0)"),
        ("float", "1.5"),
        ("slice_str", "slice('a', None)"),
    ],
)
sweep(
    "bad.map.getitem",
    "grain.MapDataset.range(5)[{v}]",
    [
        ("str", "'a'"),
        ("float", "1.5"),
        ("none", "None"),
        ("step_zero", "slice(None, None, 0)"),
        ("tuple", "(1, 2)"),
        ("np_float", "np.float64(1.0)"),
    ],
)
sweep(
    "bad.map.to_iter_dataset.read_options",
    "grain.MapDataset.range(5).to_iter_dataset({v})",
    [
        ("int", "5"),
        ("str", "'x'"),
        ("threads_neg", "grain.ReadOptions(num_threads=-1)"),
        ("buffer_neg", "grain.ReadOptions(prefetch_buffer_size=-1)"),
        ("buffer_zero", "grain.ReadOptions(prefetch_buffer_size=0)"),
        ("threads_str", "grain.ReadOptions(num_threads='2')"),
    ],
)
sweep(
    "bad.map.to_iter_dataset.allow_nones",
    "grain.MapDataset.range(5).to_iter_dataset(allow_nones={v})",
    [("str", "'yes'")],
)
sweep(
    "bad.map.mix.datasets",
    "grain.MapDataset.mix({v})",
    SEQ + [("contains_int", "[ds, 5]"), ("contains_iter_dataset", "[ds, _it(3)]"), ("str", "'ab'")],
)
sweep(
    "bad.map.mix.weights",
    "grain.MapDataset.mix([grain.MapDataset.range(3), grain.MapDataset.range(3)], weights={v})",
    [
        ("too_few", "[1]"),
        ("too_many", "[1, 2, 3]"),
        ("one_zero", "[0, 1]"),
        ("all_zero", "[0, 0]"),
        ("negative", "[-1, 2]"),
        ("str", "['a', 1]"),
        ("nan", "[float('nan'), 1]"),
        ("inf", "[float('inf'), 1]"),
        ("int", "5"),
        ("empty", "[]"),
    ],
)
bad_expr(
    "bad.map.mix.empty_component",
    "grain.MapDataset.mix([grain.MapDataset.range(0), grain.MapDataset.range(3)])",
)
bad_expr(
    "bad.map.mix.all_empty",
    "grain.MapDataset.mix([grain.MapDataset.range(0), grain.MapDataset.range(0)])",
)
sweep(
    "bad.map.concatenate",
    "grain.MapDataset.concatenate({v})",
    SEQ
    + [
        ("contains_int", "[ds, 5]"),
        ("infinite_component", "[grain.MapDataset.range(3).repeat(), ds]"),
        ("iter_dataset", "[_it(3)]"),
    ],
)
sweep(
    "bad.map.select_from_datasets.datasets",
    "grain.MapDataset.select_from_datasets({v}, Sel())",
    SEQ,
)
sweep(
    "bad.map.select_from_datasets.selection_map",
    "grain.MapDataset.select_from_datasets([ds], {v})",
    [("none", "None"), ("int", "5"), ("list", "[(0, 0), (0, 1)]")],
)


@functools.cache
def _out_of_range_sel() -> Any:
    class BadSel(grain.transforms.DatasetSelectionMap):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return (5, i)

    return BadSel


def _sel_case() -> Any:
    return grain.MapDataset.select_from_datasets([grain.MapDataset.range(3)], _out_of_range_sel()())


_register(
    Case(
        "bad.map.select_from_datasets.dataset_index_out_of_range",
        lambda: staged(_sel_case),
        "select_from_datasets([range(3)], map returning (5, i))",
    )
)
sweep("bad.map.pipe", "grain.MapDataset.range(5).pipe({v})", [("none", "None"), ("int", "5")])
sweep(
    "bad.map.apply",
    "grain.MapDataset.range(5).apply({v})",
    [
        ("none", "None"),
        ("int", "5"),
        ("list_int", "[5]"),
        ("str", "'x'"),
        ("list_none", "[None]"),
        ("lambda", "lambda x: x"),
    ],
)
bad_expr(
    "bad.map.batch_after_filter", "grain.MapDataset.range(10).filter(lambda x: x % 2).batch(2)"
)
bad_expr(
    "bad.map.batch_after_filter_getitem",
    "grain.MapDataset.range(10).filter(lambda x: x % 2).batch(2)[0]",
)
bad_expr("bad.map.abstract", "grain.MapDataset()")
bad_expr("bad.map.map_raises", "grain.MapDataset.range(3).map(lambda x: 1 // (x - 1))")
bad_expr("bad.map.map_raises_getitem", "grain.MapDataset.range(3).map(lambda x: 1 // (x - 1))[1]")
bad_expr("bad.map.filter_raises", "grain.MapDataset.range(3).filter(lambda x: [][x])")
bad_expr("bad.map.shuffle_no_seed", "grain.MapDataset.range(5).shuffle()")
bad_expr("bad.map.shuffle_infinite", "grain.MapDataset.range(5).repeat().shuffle(seed=1)")
bad_expr(
    "bad.map.random_map_no_seed_anywhere", "grain.MapDataset.range(5).random_map(lambda x, r: x)"
)
bad_expr("bad.map.source_getitem_raises", "grain.MapDataset.source([1, 2])[5]")
bad_expr("bad.map.batch_ragged", "grain.MapDataset.source([[1], [1, 2]]).batch(2)[0]")
bad_expr("bad.map.batch_mixed_types", "grain.MapDataset.source([1, 'a']).batch(2)[0]")
bad_expr("bad.map.len_of_infinite_batch", "len(grain.MapDataset.range(3).repeat().batch(2))")

# ------------------------------------------------------------------ IterDataset
sweep("bad.iter.batch.batch_size", "_it().batch({v})", INT)
sweep("bad.iter.batch.batch_fn", "_it().batch(2, batch_fn={v})", FN[1:])
sweep("bad.iter.batch.drop_remainder", "_it().batch(2, drop_remainder={v})", BOOL)
sweep("bad.iter.map", "_it().map({v})", FN + [("filter_transform", "KeepEven()")])
sweep("bad.iter.filter", "_it().filter({v})", FN + [("map_transform", "PlusOne()")])
sweep("bad.iter.map_with_index", "_it().map_with_index({v})", FN)
sweep("bad.iter.random_map", "_it().random_map({v}, seed=1)", FN)
sweep("bad.iter.random_map.seed", "_it().random_map(lambda x, r: x, seed={v})", SEED[:-1])
sweep("bad.iter.seed", "_it().seed({v})", SEED)
sweep(
    "bad.iter.mix.datasets",
    "grain.IterDataset.mix({v})",
    SEQ + [("contains_int", "[_it(), 5]"), ("empty_dict", "{}")],
)
sweep(
    "bad.iter.mix.weights",
    "grain.IterDataset.mix([_it(), _it()], weights={v})",
    [
        ("too_few", "[1]"),
        ("one_zero", "[0, 1]"),
        ("all_zero", "[0, 0]"),
        ("negative", "[-1, 2]"),
        ("str", "'x'"),
        ("nan", "[float('nan'), 1]"),
    ],
)
sweep(
    "bad.iter.mix.mapping_weights",
    "grain.IterDataset.mix({'a': _it(), 'b': _it()}, weights={v})",
    [("wrong_keys", "{'a': 1.0, 'c': 1.0}"), ("list", "[1.0, 1.0]"), ("missing_key", "{'a': 1.0}")],
)
bad_expr(
    "bad.iter.mix.mapping_datasets_list_weights_ok",
    "grain.IterDataset.mix([_it(), _it()], weights={'a': 1, 'b': 1})",
)
bad_expr("bad.iter.mix.empty_component", "grain.IterDataset.mix([_it(0), _it(3)])")
sweep(
    "bad.iter.mp_prefetch.options",
    "_it().mp_prefetch({v})",
    [("int", "5"), ("str", "'x'"), ("neg_workers", "grain.MultiprocessingOptions(num_workers=-1)")],
    timeout=30,
)
sweep("bad.iter.apply", "_it().apply({v})", [("none", "None"), ("int", "5"), ("list_int", "[5]")])
sweep("bad.iter.pipe", "_it().pipe({v})", [("none", "None")])
bad_expr("bad.iter.abstract", "grain.IterDataset()")
bad_expr("bad.iter.iterator_abstract", "grain.DatasetIterator()")
bad_expr("bad.iter.map_raises", "_it().map(lambda x: {}[x])")
bad_expr("bad.iter.batch_ragged", "_it(3).map(lambda x: np.zeros(x)).batch(3)")
bad_expr("bad.iter.filter_non_bool", "_it(3).filter(lambda x: np.array([1, 2]))")

# ------------------------------------------------------------------ set_state with garbage
_GARBAGE = [
    ("none", "None"),
    ("empty_dict", "{}"),
    ("str", "'garbage'"),
    ("int", "5"),
    ("list", "[]"),
    ("wrong_key", "{'wrong': 1}"),
    ("next_index_str", "{'next_index': 'a'}"),
    ("next_index_neg", "{'next_index': -1}"),
    ("next_index_huge", "{'next_index': 10**6}"),
    ("next_index_float", "{'next_index': 1.5}"),
]
sweep("bad.state.to_iter", "restored(_it(5), {v})", _GARBAGE)
sweep(
    "bad.state.batch",
    "restored(_it(6).batch(2), {v})",
    [("empty_dict", "{}"), ("str", "'garbage'"), ("none", "None"), ("wrong_key", "{'wrong': 1}")],
)
sweep(
    "bad.state.mix",
    "restored(grain.IterDataset.mix([_it(), _it()]), {v})",
    [
        ("empty_dict", "{}"),
        ("str", "'garbage'"),
        ("parents_short", "{'parents': [{'next_index': 0}], 'index': 0, 'stop': False}"),
    ],
)
sweep(
    "bad.state.map_iterator",
    "restored(iter(grain.MapDataset.range(5)), {v})",
    [("empty_dict", "{}"), ("str", "'garbage'"), ("none", "None")],
)
sweep(
    "bad.state.thread_prefetch",
    "restored(grain.experimental.ThreadPrefetchIterDataset(_it(5), prefetch_buffer_size=2), {v})",
    [("empty_dict", "{}"), ("str", "'garbage'")],
)
sweep(
    "bad.state.from_other_pipeline",
    "restored(_it(6).batch(2), {v})",
    [("mix_state", "iter(grain.IterDataset.mix([_it(), _it()])).get_state()")],
)
sweep(
    "bad.state.dataloader",
    "restored(loader(4), {v})",
    [
        ("bytes_garbage", "b'garbage'"),
        ("str", "'garbage'"),
        ("empty_dict", "{}"),
        ("none", "None"),
        ("json_wrong_version", "b'{\"version\": 99}'"),
        ("json_empty", "b'{}'"),
    ],
    timeout=20,
)
bad_expr(
    "bad.state.dataloader_other_seed",
    "restored(loader(4, sampler=sampler(4, num_epochs=1, shuffle=True, seed=2)), iter(loader(4, sampler=sampler(4, num_epochs=1, shuffle=True, seed=1))).get_state())",
    timeout=20,
)
bad_expr(
    "bad.state.dataloader_other_worker_count",
    "restored(loader(4, worker_count=1), iter(loader(4)).get_state())",
    timeout=60,
)

# ------------------------------------------------------------------ iterator misuse
bad_expr(
    "bad.iterator.next_after_close_batch",
    "(lambda it: (it.close(), next(it)))(iter(_it(5).batch(2)))",
)
bad_expr(
    "bad.iterator.next_after_close_thread_prefetch",
    "(lambda it: (next(it), it.close(), next(it)))(iter(grain.experimental.ThreadPrefetchIterDataset(_it(5), prefetch_buffer_size=2)))",
)
bad_expr(
    "bad.iterator.next_after_close_map_iter",
    "(lambda it: (it.close(), next(it)))(iter(grain.MapDataset.range(3)))",
)
bad_expr(
    "bad.iterator.set_state_after_close",
    "(lambda it: (it.close(), it.set_state(it.get_state())))(iter(_it(5)))",
)
bad_expr(
    "bad.iterator.dataloader_next_after_exhaust_twice",
    "(lambda it: (list(it), list(it)))(iter(loader(2)))",
    timeout=20,
)

# ------------------------------------------------------------------ experimental
sweep(
    "bad.exp.interleave.datasets",
    "grain.experimental.InterleaveIterDataset({v}, cycle_length=2)",
    SEQ + [("contains_int", "[5]")],
)
sweep(
    "bad.exp.interleave.cycle_length",
    "grain.experimental.InterleaveIterDataset([_it(3), _it(3)], cycle_length={v})",
    INT,
)
sweep(
    "bad.exp.interleave.num_make_iter_threads",
    "grain.experimental.InterleaveIterDataset([_it(3), _it(3)], cycle_length=2, num_make_iter_threads={v})",
    [("neg", "-1"), ("zero", "0")],
)
sweep(
    "bad.exp.interleave.iter_buffer_size",
    "grain.experimental.InterleaveIterDataset([_it(3), _it(3)], cycle_length=2, iter_buffer_size={v})",
    [("neg", "-1"), ("zero", "0")],
)
sweep(
    "bad.exp.window_shuffle_iter.window_size",
    "grain.experimental.WindowShuffleIterDataset(_it(5), window_size={v}, seed=1)",
    INT,
)
sweep(
    "bad.exp.window_shuffle_iter.seed",
    "grain.experimental.WindowShuffleIterDataset(_it(5), window_size=2, seed={v})",
    SEED,
)
sweep(
    "bad.exp.window_shuffle_map.window_size",
    "grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(5), window_size={v}, seed=1)",
    INT,
)
sweep(
    "bad.exp.window_shuffle_map.seed",
    "grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(5), window_size=2, seed={v})",
    SEED,
)
bad_expr(
    "bad.exp.window_shuffle_iter.missing_seed",
    "grain.experimental.WindowShuffleIterDataset(_it(5), window_size=2)",
)
bad_expr(
    "bad.exp.window_shuffle_iter.positional",
    "grain.experimental.WindowShuffleIterDataset(_it(5), 2, 1)",
)
sweep(
    "bad.exp.thread_prefetch.buffer",
    "grain.experimental.ThreadPrefetchIterDataset(_it(5), prefetch_buffer_size={v})",
    [("neg", "-1"), ("none", "None"), ("str", "'2'"), ("float", "2.5")],
)
sweep(
    "bad.exp.thread_prefetch.parent",
    "grain.experimental.ThreadPrefetchIterDataset({v}, prefetch_buffer_size=2)",
    [("map_dataset", "grain.MapDataset.range(3)"), ("none", "None"), ("list", "[1, 2]")],
)
sweep(
    "bad.exp.zip_iter.parents",
    "grain.experimental.ZipIterDataset({v})",
    SEQ + [("contains_int", "[_it(3), 5]"), ("map_dataset", "[grain.MapDataset.range(3)]")],
)
sweep(
    "bad.exp.zip_iter.strict",
    "grain.experimental.ZipIterDataset([_it(3), _it(3)], strict={v})",
    [("str", "'yes'")],
)
sweep(
    "bad.exp.zip_map.parents",
    "grain.experimental.ZipMapDataset({v})",
    SEQ + [("iter_dataset", "[grain.MapDataset.range(3), _it(3)]")],
)
bad_expr(
    "bad.exp.zip_iter.strict_unequal",
    "grain.experimental.ZipIterDataset([_it(2), _it(3)], strict=True)",
)
bad_expr(
    "bad.exp.zip_map.unequal_getitem_past_short",
    "grain.experimental.ZipMapDataset([grain.MapDataset.range(2), grain.MapDataset.range(5)])[3]",
)
sweep(
    "bad.exp.flat_map_iter.transform",
    "grain.experimental.FlatMapIterDataset(_it(3), {v})",
    [("none", "None"), ("lambda", "lambda x: [x]"), ("map_transform", "PlusOne()")],
)
sweep(
    "bad.exp.flat_map_map.transform",
    "grain.experimental.FlatMapMapDataset(grain.MapDataset.range(3), {v})",
    [("none", "None"), ("lambda", "lambda x: [x]"), ("map_transform", "PlusOne()")],
)
sweep(
    "bad.exp.flat_map_iter.max_fan_out",
    "grain.experimental.FlatMapIterDataset(_it(3), fan({v}))",
    [("zero", "0"), ("neg", "-1"), ("none", "None"), ("str", "'2'")],
)
sweep(
    "bad.exp.flat_map_map.max_fan_out",
    "grain.experimental.FlatMapMapDataset(grain.MapDataset.range(3), fan({v}))",
    [("zero", "0"), ("neg", "-1"), ("none", "None"), ("str", "'2'")],
)
bad_expr(
    "bad.exp.flat_map_map.exceeds_fan_out",
    "grain.experimental.FlatMapMapDataset(grain.MapDataset.range(3), fan(1, out=3))",
)
bad_expr(
    "bad.exp.flat_map_iter.exceeds_fan_out",
    "grain.experimental.FlatMapIterDataset(_it(3), fan(1, out=3))",
)
bad_expr(
    "bad.exp.flat_map_iter.parent_map_dataset",
    "grain.experimental.FlatMapIterDataset(grain.MapDataset.range(3), fan(2))",
)
sweep("bad.exp.limit.count", "grain.experimental.LimitIterDataset(_it(5), count={v})", INT)
sweep(
    "bad.exp.limit.parent",
    "grain.experimental.LimitIterDataset({v}, count=2)",
    [("map_dataset", "grain.MapDataset.range(3)"), ("none", "None")],
)
sweep(
    "bad.exp.repeat.num_epochs",
    "grain.experimental.RepeatIterDataset(_it(5), num_epochs={v})",
    [("neg", "-1"), ("zero", "0"), ("str", "'2'"), ("float", "1.5")],
)
sweep(
    "bad.exp.repeat.parent",
    "grain.experimental.RepeatIterDataset({v}, num_epochs=2)",
    [("map_dataset", "grain.MapDataset.range(3)"), ("none", "None")],
)
sweep(
    "bad.exp.rebatch.batch_size",
    "grain.experimental.RebatchIterDataset(_it(6).batch(2), batch_size={v})",
    INT,
)
bad_expr(
    "bad.exp.rebatch.unbatched_scalars",
    "grain.experimental.RebatchIterDataset(_it(6), batch_size=2)",
)
sweep(
    "bad.exp.first_fit.num_packing_bins",
    "grain.experimental.FirstFitPackIterDataset(seqs([2, 3]), length_struct={'tokens': 5}, num_packing_bins={v})",
    INT,
)
sweep(
    "bad.exp.first_fit.length_struct",
    "grain.experimental.FirstFitPackIterDataset(seqs([2, 3]), length_struct={v}, num_packing_bins=2)",
    [
        ("none", "None"),
        ("empty", "{}"),
        ("zero", "{'tokens': 0}"),
        ("neg", "{'tokens': -1}"),
        ("other_key", "{'other': 5}"),
        ("int", "5"),
        ("str_len", "{'tokens': 'a'}"),
    ],
)
sweep(
    "bad.exp.first_fit.seed",
    "grain.experimental.FirstFitPackIterDataset(seqs([2, 3]), length_struct={'tokens': 5}, num_packing_bins=2, seed={v})",
    [("neg", "-1"), ("str", "'1'"), ("2**64", "2**64")],
)
sweep(
    "bad.exp.first_fit.max_sequences_per_bin",
    "grain.experimental.FirstFitPackIterDataset(seqs([2, 3]), length_struct={'tokens': 5}, num_packing_bins=2, max_sequences_per_bin={v})",
    [("zero", "0"), ("neg", "-1")],
)
bad_expr(
    "bad.exp.first_fit.sequence_too_long",
    "grain.experimental.FirstFitPackIterDataset(seqs([3, 9]), length_struct={'tokens': 5}, num_packing_bins=2, shuffle_bins=False)",
)
bad_expr(
    "bad.exp.first_fit.non_dict_elements",
    "grain.experimental.FirstFitPackIterDataset(_it(3).map(lambda x: np.arange(x + 1)), length_struct={'tokens': 5}, num_packing_bins=2)",
)
bad_expr(
    "bad.exp.first_fit.scalar_feature",
    "grain.experimental.FirstFitPackIterDataset(_it(3).map(lambda x: {'tokens': x}), length_struct={'tokens': 5}, num_packing_bins=2)",
)
bad_expr(
    "bad.exp.first_fit.map_dataset_parent",
    "grain.experimental.FirstFitPackIterDataset(grain.MapDataset.source([{'tokens': np.arange(2)}]), length_struct={'tokens': 5}, num_packing_bins=2)",
)
sweep(
    "bad.exp.best_fit.num_packing_bins",
    "grain.experimental.BestFitPackIterDataset(seqs([2, 3]), length_struct={'tokens': 5}, num_packing_bins={v})",
    INT,
)
sweep(
    "bad.exp.best_fit.length_struct",
    "grain.experimental.BestFitPackIterDataset(seqs([2, 3]), length_struct={v}, num_packing_bins=2)",
    [("none", "None"), ("empty", "{}"), ("zero", "{'tokens': 0}"), ("other_key", "{'other': 5}")],
)
bad_expr(
    "bad.exp.best_fit.sequence_too_long",
    "grain.experimental.BestFitPackIterDataset(seqs([3, 9]), length_struct={'tokens': 5}, num_packing_bins=2, shuffle_bins=False)",
)
sweep(
    "bad.exp.concat_then_split.length_struct",
    "grain.experimental.ConcatThenSplitIterDataset(seqs([2, 3]), length_struct={v})",
    [
        ("none", "None"),
        ("empty", "{}"),
        ("zero", "{'tokens': 0}"),
        ("neg", "{'tokens': -2}"),
        ("other_key", "{'other': 4}"),
        ("list", "[4]"),
    ],
)
bad_expr(
    "bad.exp.concat_then_split.non_dict_elements",
    "grain.experimental.ConcatThenSplitIterDataset(_it(3), length_struct={'tokens': 4})",
)
bad_expr(
    "bad.exp.concat_then_split.bos_without_token",
    "grain.experimental.ConcatThenSplitIterDataset(seqs([2, 3]), length_struct={'tokens': 4}, bos_handling=grain.experimental.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS, bos_features=['tokens'])",
)
bad_expr(
    "bad.exp.concat_then_split.bos_handling_str",
    "grain.experimental.ConcatThenSplitIterDataset(seqs([2, 3]), length_struct={'tokens': 4}, bos_handling='x')",
)
sweep(
    "bad.exp.batch_and_pad.values",
    "grain.experimental.batch_and_pad({v}, batch_size=2)",
    [("none", "None"), ("int", "5")],
)
sweep(
    "bad.exp.batch_and_pad.batch_size", "grain.experimental.batch_and_pad([1], batch_size={v})", INT
)
bad_expr("bad.exp.batch_and_pad.positional_batch_size", "grain.experimental.batch_and_pad([1], 2)")
sweep(
    "bad.exp.multithread_prefetch.num_threads",
    "grain.experimental.multithread_prefetch(_it(5), num_threads={v}, buffer_size=2)",
    [("neg", "-1"), ("none", "None"), ("str", "'2'")],
)
sweep(
    "bad.exp.multithread_prefetch.buffer_size",
    "grain.experimental.multithread_prefetch(_it(5), num_threads=2, buffer_size={v})",
    [("neg", "-1"), ("zero", "0"), ("none", "None")],
)
sweep(
    "bad.exp.multithread_prefetch.ds",
    "grain.experimental.multithread_prefetch({v}, num_threads=2, buffer_size=2)",
    [("map_dataset", "grain.MapDataset.range(3)"), ("none", "None")],
)
sweep("bad.exp.rng_pool.seed", "grain.experimental.RngPool({v})", SEED)
sweep(
    "bad.exp.rng_pool.acquire_index",
    "grain.experimental.RngPool(1).acquire_rng({v})",
    [("neg", "-1"), ("none", "None"), ("str", "'a'")],
)
sweep(
    "bad.exp.set_next_index.index",
    "grain.experimental.set_next_index(iter(_it(5)), {v})",
    [("neg", "-1"), ("none", "None"), ("str", "'a'"), ("float", "1.5")],
)
sweep(
    "bad.exp.set_next_index.iterator",
    "grain.experimental.set_next_index({v}, 1)",
    [
        ("none", "None"),
        ("list_iterator", "iter([1, 2])"),
        ("batch_iterator", "iter(_it(6).batch(2))"),
        ("mix_iterator", "iter(grain.IterDataset.mix([_it(), _it()]))"),
    ],
)
sweep(
    "bad.exp.get_next_index",
    "grain.experimental.get_next_index({v})",
    [
        ("none", "None"),
        ("int", "5"),
        ("list_iterator", "iter([1, 2])"),
        ("mix_iterator", "iter(grain.IterDataset.mix([_it(), _it()]))"),
    ],
)
sweep(
    "bad.exp.get_element_spec",
    "grain.experimental.get_element_spec({v})",
    [
        ("none", "None"),
        ("int", "5"),
        ("empty_map", "grain.MapDataset.range(0)"),
        ("list", "[1, 2]"),
    ],
)
sweep(
    "bad.exp.options.filter_warn_threshold_ratio",
    "grain.experimental.DatasetOptions(filter_warn_threshold_ratio={v})",
    [("neg", "-0.5"), ("above_one", "1.5"), ("str", "'x'")],
)
sweep(
    "bad.exp.options.filter_raise_threshold_ratio",
    "grain.experimental.DatasetOptions(filter_raise_threshold_ratio={v})",
    [("neg", "-1"), ("above_one", "2")],
)
sweep(
    "bad.exp.options.min_shm_size",
    "grain.experimental.DatasetOptions(min_shm_size={v})",
    [("neg", "-1"), ("str", "'x'")],
)
sweep(
    "bad.exp.options.execution_tracking_mode",
    "grain.experimental.DatasetOptions(execution_tracking_mode={v})",
    [("str", "'x'"), ("int", "5")],
)
bad_expr("bad.exp.options.positional", "grain.experimental.DatasetOptions(0.5)")
bad_expr("bad.exp.options.unknown_kw", "grain.experimental.DatasetOptions(no_such_option=1)")
sweep(
    "bad.exp.options.merge",
    "grain.experimental.DatasetOptions().merge({v})",
    [("int", "5"), ("dict", "{}")],
)
sweep(
    "bad.exp.with_options.options",
    "grain.experimental.WithOptionsIterDataset(_it(3), {v})",
    [("none", "None"), ("int", "5"), ("dict", "{}")],
)
bad_expr(
    "bad.exp.with_options.map_parent",
    "grain.experimental.WithOptionsIterDataset(grain.MapDataset.range(3), grain.experimental.DatasetOptions())",
)
bad_expr(
    "bad.exp.with_options.raise_threshold_hit",
    "grain.experimental.WithOptionsIterDataset(grain.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x < 10), grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5))",
    timeout=20,
)
sweep(
    "bad.exp.apply_transformations",
    "grain.experimental.apply_transformations(grain.MapDataset.range(3), {v})",
    [("none", "None"), ("int", "5"), ("list_int", "[5]")],
)
sweep(
    "bad.exp.cache.parent",
    "grain.experimental.CacheIterDataset({v})",
    [("none", "None"), ("map_dataset", "grain.MapDataset.range(3)")],
)
sweep(
    "bad.exp.pick_performance_config.ram_budget_mb",
    "grain.experimental.pick_performance_config(_it(3), ram_budget_mb={v}, max_workers=2, max_buffer_size=None)",
    [("neg", "-1"), ("zero", "0"), ("str", "'x'")],
    timeout=30,
)
sweep(
    "bad.exp.pick_performance_config.max_workers",
    "grain.experimental.pick_performance_config(_it(3), ram_budget_mb=100, max_workers={v}, max_buffer_size=None)",
    [("neg", "-1"), ("zero", "0")],
    timeout=30,
)
sweep(
    "bad.exp.pick_performance_config.ds",
    "grain.experimental.pick_performance_config({v}, ram_budget_mb=100, max_workers=2, max_buffer_size=None)",
    [("none", "None"), ("map_dataset", "grain.MapDataset.range(3)")],
    timeout=30,
)
sweep(
    "bad.exp.elastic.global_batch_size",
    "grain.experimental.ElasticIterator(grain.MapDataset.range(10), global_batch_size={v}, shard_options=grain.sharding.NoSharding())",
    [("zero", "0"), ("neg", "-1")],
    timeout=30,
)
bad_expr(
    "bad.exp.elastic.iter_dataset",
    "grain.experimental.ElasticIterator(_it(10), global_batch_size=2, shard_options=grain.sharding.NoSharding())",
    timeout=30,
)
sweep(
    "bad.exp.index_shuffle",
    "grain.experimental.index_shuffle({v})",
    [
        ("neg_max_index", "0, max_index=-1, seed=1, rounds=4"),
        ("index_past_max", "10, max_index=5, seed=1, rounds=4"),
        ("neg_seed", "0, max_index=5, seed=-1, rounds=4"),
        ("zero_rounds", "0, max_index=5, seed=1, rounds=0"),
    ],
)
sweep(
    "bad.exp.assert_equal_output_after_checkpoint",
    "grain.experimental.assert_equal_output_after_checkpoint({v})",
    [("none", "None"), ("map_dataset", "grain.MapDataset.range(3)")],
    timeout=30,
)
sweep(
    "bad.exp.shape_dtype_struct",
    "grain.experimental.ShapeDtypeStruct({v})",
    [("no_args", ""), ("shape_int", "shape=3, dtype=np.int32")],
)

# ------------------------------------------------------------------ transforms
sweep(
    "bad.tr.batch.batch_size",
    "grain.experimental.apply_transformations(grain.MapDataset.range(5), grain.transforms.Batch({v}))",
    INT,
)
sweep(
    "bad.tr.batch.batch_size_ctor",
    "grain.transforms.Batch({v})",
    [("zero", "0"), ("neg", "-1"), ("str", "'2'")],
)
sweep(
    "bad.tr.batch.drop_remainder",
    "grain.experimental.apply_transformations(grain.MapDataset.range(5), grain.transforms.Batch(2, drop_remainder={v}))",
    BOOL,
)
bad_expr("bad.tr.batch.missing", "grain.transforms.Batch()")
bad_expr("bad.tr.batch.unknown_kw", "grain.transforms.Batch(2, foo=1)")
bad_expr("bad.tr.map_class_not_subclassed", "grain.transforms.Map()")
bad_expr(
    "bad.tr.apply_selection_map",
    "grain.experimental.apply_transformations(grain.MapDataset.range(3), [Sel()])",
)

# ------------------------------------------------------------------ DataLoader
_L = "pg.DataLoader(data_source=list(range(3)), sampler=sampler(3, num_epochs=1), worker_count=0, {v})"
sweep(
    "bad.dl.data_source",
    "pg.DataLoader(data_source={v}, sampler=sampler(3, num_epochs=1), worker_count=0)",
    [("none", "None"), ("int", "5"), ("iterator", "iter([1, 2, 3])"), ("short", "[1]")],
    timeout=20,
)
sweep(
    "bad.dl.sampler",
    "pg.DataLoader(data_source=[1, 2, 3], sampler={v}, worker_count=0)",
    [("none", "None"), ("int", "5"), ("list", "[0, 1, 2]")],
    timeout=20,
)
sweep(
    "bad.dl.operations",
    _L.replace("{v}", "operations={v}"),
    [("none", "None"), ("int", "5"), ("list_int", "[5]"), ("list_none", "[None]"), ("str", "'x'")],
    timeout=20,
)
sweep(
    "bad.dl.worker_count",
    _L.replace("worker_count=0, ", "").replace("{v}", "worker_count={v}"),
    [("neg", "-1"), ("str", "'x'"), ("float", "1.5")],
    timeout=30,
)
sweep(
    "bad.dl.worker_buffer_size",
    _L.replace("{v}", "worker_buffer_size={v}"),
    [("zero", "0"), ("neg", "-1")],
    timeout=20,
)
sweep(
    "bad.dl.shard_options",
    _L.replace("{v}", "shard_options={v}"),
    [("int", "5"), ("str", "'x'"), ("index_out_of_range", "grain.sharding.ShardOptions(5, 2)")],
    timeout=20,
)
sweep(
    "bad.dl.read_options",
    _L.replace("{v}", "read_options={v}"),
    [
        ("int", "5"),
        ("threads_neg", "grain.ReadOptions(num_threads=-1)"),
        ("buffer_neg", "grain.ReadOptions(prefetch_buffer_size=-1)"),
    ],
    timeout=20,
)
bad_expr("bad.dl.positional", "pg.DataLoader([1, 2], sampler(2, num_epochs=1))")
bad_expr(
    "bad.dl.sampler_longer_than_source",
    "pg.DataLoader(data_source=[1, 2, 3], sampler=sampler(10, num_epochs=1), worker_count=0)",
    timeout=20,
)
bad_expr(
    "bad.dl.operation_raises",
    "pg.DataLoader(data_source=[1, 0], sampler=sampler(2, num_epochs=1), operations=[pg.MapOperation(lambda x: 1 // x)], worker_count=0)",
    timeout=20,
)
bad_expr(
    "bad.dl.batch_after_batch_ragged",
    "pg.DataLoader(data_source=[[1], [1, 2]], sampler=sampler(2, num_epochs=1), operations=[grain.transforms.Batch(2)], worker_count=0)",
    timeout=20,
)
bad_expr(
    "bad.dl.random_map_without_seed",
    "pg.DataLoader(data_source=[1, 2], sampler=sampler(2, num_epochs=1), operations=[pg.RandomMapOperation(lambda x, r: x)], worker_count=0)",
    timeout=20,
)

# ------------------------------------------------------------------ operations
sweep(
    "bad.ops.batch_operation.batch_size",
    "loader(4, operations=[pg.BatchOperation(batch_size={v})])",
    [("zero", "0"), ("neg", "-1")],
    timeout=20,
)
sweep(
    "bad.ops.map_operation.fn",
    "loader(3, operations=[pg.MapOperation({v})])",
    [("none", "None"), ("int", "5")],
    timeout=20,
)
sweep(
    "bad.ops.filter_operation.fn",
    "loader(3, operations=[pg.FilterOperation({v})])",
    [("none", "None")],
    timeout=20,
)
sweep(
    "bad.ops.pack_and_batch.length_struct",
    "loader(2, data_source=[{'t': np.arange(2)}, {'t': np.arange(3)}], operations=[grain.experimental.PackAndBatchOperation(length_struct={v}, batch_size=2)])",
    [("none", "None"), ("empty", "{}"), ("zero", "{'t': 0}"), ("other_key", "{'u': 4}")],
    timeout=20,
)
bad_expr(
    "bad.ops.pack_and_batch.too_long",
    "loader(2, data_source=[{'t': np.arange(9)}, {'t': np.arange(3)}], operations=[grain.experimental.PackAndBatchOperation(length_struct={'t': 4}, batch_size=2)])",
    timeout=20,
)
sweep(
    "bad.ops.pack_and_batch.batch_size",
    "loader(2, data_source=[{'t': np.arange(2)}, {'t': np.arange(3)}], operations=[grain.experimental.PackAndBatchOperation(length_struct={'t': 4}, batch_size={v})])",
    [("zero", "0"), ("neg", "-1")],
    timeout=20,
)

# ------------------------------------------------------------------ samplers
sweep(
    "bad.smp.index.num_records",
    "grain.samplers.IndexSampler({v}, shard_options=grain.sharding.NoSharding(), num_epochs=1)",
    [("zero", "0"), ("neg", "-1"), ("none", "None"), ("str", "'3'"), ("float", "2.5")],
)
sweep(
    "bad.smp.index.num_epochs",
    "grain.samplers.IndexSampler(5, shard_options=grain.sharding.NoSharding(), num_epochs={v})",
    [("zero", "0"), ("neg", "-1"), ("str", "'2'"), ("float", "1.5")],
)
bad_expr(
    "bad.smp.index.shuffle_without_seed",
    "grain.samplers.IndexSampler(5, shard_options=grain.sharding.NoSharding(), shuffle=True)",
)
sweep(
    "bad.smp.index.shuffle_seed",
    "grain.samplers.IndexSampler(5, shard_options=grain.sharding.NoSharding(), shuffle=True, seed={v})",
    SEED[:-1],
)
sweep(
    "bad.smp.index.seed_no_shuffle",
    "grain.samplers.IndexSampler(5, shard_options=grain.sharding.NoSharding(), seed={v})",
    [("neg", "-1"), ("2**32", "2**32")],
)
sweep(
    "bad.smp.index.shard_options",
    "grain.samplers.IndexSampler(5, shard_options={v})",
    [("none", "None"), ("int", "5"), ("tuple", "(0, 1)")],
)
sweep(
    "bad.smp.index.shuffle",
    "grain.samplers.IndexSampler(5, shard_options=grain.sharding.NoSharding(), shuffle={v}, seed=1)",
    BOOL,
)
sweep(
    "bad.smp.index.getitem",
    "grain.samplers.IndexSampler(5, shard_options=grain.sharding.NoSharding(), num_epochs=1)[{v}]",
    [("str", "'a'"), ("float", "1.5"), ("none", "None"), ("slice", "1:3")],
)
bad_expr(
    "bad.smp.index.positional_shard",
    "grain.samplers.IndexSampler(5, grain.sharding.NoSharding(), False, 1, 3)",
)
sweep(
    "bad.smp.sequential.num_records",
    "grain.samplers.SequentialSampler({v})",
    [("zero", "0"), ("neg", "-1"), ("none", "None")],
)
sweep(
    "bad.smp.sequential.seed",
    "grain.samplers.SequentialSampler(5, seed={v})",
    [("neg", "-1"), ("2**32", "2**32")],
)
bad_expr("bad.smp.sampler_abstract", "grain.samplers.Sampler()")

# ------------------------------------------------------------------ sharding
sweep(
    "bad.shard.options.shard_index",
    "grain.sharding.ShardOptions({v}, 2)",
    [("neg", "-1"), ("equal_count", "2"), ("above_count", "3"), ("none", "None"), ("str", "'0'")],
)
sweep(
    "bad.shard.options.shard_count",
    "grain.sharding.ShardOptions(0, {v})",
    [("zero", "0"), ("neg", "-1"), ("none", "None"), ("str", "'2'")],
)
sweep(
    "bad.shard.options.in_sampler",
    "grain.samplers.IndexSampler(10, num_epochs=1, shard_options=grain.sharding.ShardOptions({v}))",
    [("index_eq_count", "2, 2"), ("neg_index", "-1, 2"), ("zero_count", "0, 0")],
)
bad_expr("bad.shard.options.missing", "grain.sharding.ShardOptions()")
bad_expr("bad.shard.no_sharding_args", "grain.sharding.NoSharding(1, 2)")
bad_expr(
    "bad.shard.drop_remainder_more_shards_than_records",
    "grain.samplers.IndexSampler(2, num_epochs=1, shard_options=grain.sharding.ShardOptions(0, 3, drop_remainder=True))",
)

# ------------------------------------------------------------------ sources
sweep(
    "bad.src.range.step",
    "grain.sources.RangeDataSource(0, 5, {v})",
    [("zero", "0"), ("none", "None"), ("str", "'1'"), ("float", "1.5")],
)
sweep(
    "bad.src.range.start",
    "grain.sources.RangeDataSource({v}, 5, 1)",
    [("none", "None"), ("str", "'0'"), ("float", "0.5")],
)
bad_expr("bad.src.range.missing_step", "grain.sources.RangeDataSource(0, 5)")
sweep(
    "bad.src.range.getitem",
    "grain.sources.RangeDataSource(0, 5, 1)[{v}]",
    [("str", "'a'"), ("float", "1.5"), ("none", "None")],
)
sweep(
    "bad.src.shared_memory.elements",
    "grain.sources.SharedMemoryDataSource({v})",
    [
        ("int", "5"),
        ("object", "object()"),
        ("nested_list", "[[1, 2]]"),
        ("dict_elements", "[{'a': 1}]"),
        ("numpy_elements", "[np.zeros(2)]"),
    ],
)
sweep(
    "bad.src.shared_memory.name",
    "grain.sources.SharedMemoryDataSource(name={v})",
    [("missing", "'no_such_segment_graindiff'"), ("int", "5")],
)
sweep(
    "bad.src.array_record.paths",
    "grain.sources.ArrayRecordDataSource({v})",
    [
        ("none", "None"),
        ("int", "5"),
        ("empty", "[]"),
        ("list_none", "[None]"),
        ("empty_str", "''"),
        ("missing", "'/nonexistent/graindiff.array_record'"),
    ],
)
bad_expr(
    "bad.src.array_record.reader_options_bad",
    "grain.sources.ArrayRecordDataSource(write_array_record([b'a']), reader_options={'readahead_buffer_size': 'x'})",
)

# ------------------------------------------------------------------ grain.load
sweep(
    "bad.load.source", "grain.load({v}, num_epochs=1)", [("none", "None"), ("int", "5")], timeout=20
)
sweep(
    "bad.load.num_epochs",
    "grain.load([1, 2, 3], num_epochs={v})",
    [("zero", "0"), ("neg", "-1")],
    timeout=20,
)
bad_expr(
    "bad.load.shuffle_without_seed", "grain.load([1, 2, 3], num_epochs=1, shuffle=True)", timeout=20
)
sweep(
    "bad.load.batch_size",
    "grain.load([1, 2, 3], num_epochs=1, batch_size={v})",
    [("zero", "0"), ("neg", "-1"), ("str", "'2'")],
    timeout=20,
)
sweep(
    "bad.load.worker_count",
    "grain.load([1, 2, 3], num_epochs=1, worker_count={v})",
    [("neg", "-1")],
    timeout=20,
)
sweep(
    "bad.load.transformations",
    "grain.load([1, 2, 3], num_epochs=1, transformations={v})",
    [("list_int", "[5]"), ("int", "5"), ("none", "None")],
    timeout=20,
)
sweep(
    "bad.load.seed",
    "grain.load([1, 2, 3], num_epochs=1, shuffle=True, seed={v})",
    [("neg", "-1"), ("2**32", "2**32")],
    timeout=20,
)
bad_expr("bad.load.positional_options", "grain.load([1, 2, 3], 1)", timeout=20)

# ------------------------------------------------------------------ options and misc
sweep(
    "bad.opt.read.num_threads",
    "grain.MapDataset.range(5).to_iter_dataset(grain.ReadOptions(num_threads={v}))",
    [("neg", "-1"), ("str", "'x'"), ("none", "None")],
)
sweep(
    "bad.opt.read.prefetch_buffer_size",
    "grain.MapDataset.range(5).to_iter_dataset(grain.ReadOptions(prefetch_buffer_size={v}))",
    [("neg", "-1"), ("str", "'x'"), ("none", "None")],
)
sweep(
    "bad.opt.mp.num_workers",
    "_it().mp_prefetch(grain.MultiprocessingOptions(num_workers={v}))",
    [("neg", "-1"), ("str", "'x'"), ("none", "None")],
    timeout=30,
)
sweep(
    "bad.opt.mp.per_worker_buffer_size",
    "_it().mp_prefetch(grain.MultiprocessingOptions(num_workers=1, per_worker_buffer_size={v}))",
    [("zero", "0"), ("neg", "-1")],
    timeout=60,
)
bad_expr("bad.opt.mp.positional_unknown", "grain.MultiprocessingOptions(1, 2, False, 4)")
bad_expr("bad.rec.metadata_missing", "pg.RecordMetadata()")
bad_expr("bad.rec.record_missing", "pg.Record()")
sweep(
    "bad.shm_array.shape",
    "grain.multiprocessing.SharedMemoryArray({v})",
    [("none", "None"), ("str", "'x'"), ("float_dims", "(2.5,)")],
)
sweep(
    "bad.shm_array.dtype",
    "grain.multiprocessing.SharedMemoryArray((2,), dtype={v})",
    [("str", "'not_a_dtype'"), ("object_dtype", "object")],
)
sweep("bad.config.update", "grain.config.update({v}, 1)", [("none", "None"), ("int", "5")])
sweep(
    "bad.config.get_or_default",
    "grain.config.get_or_default({v})",
    [("none", "None"), ("int", "5")],
)
