"""DataLoader, grain.load, operations, samplers and sharding."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import grain
import grain.python as pg
from _registry import L, case, expr, first, sampler, state_shape, take, types_of


def _loader(n: int = 6, **kw: Any) -> Any:
    smp = kw.pop("sampler", None)
    if smp is None:
        smp = sampler(n, num_epochs=kw.pop("num_epochs", 1), shuffle=False)
    return pg.DataLoader(
        data_source=kw.pop("data_source", list(range(n))),
        sampler=smp,
        worker_count=kw.pop("worker_count", 0),
        **kw,
    )


def _decode_state(st: Any) -> Any:
    if isinstance(st, bytes):
        try:
            return {"bytes_json": json.loads(st.decode())}
        except ValueError:
            return {"bytes": True}
    return st


# ------------------------------------------------------------------ DataLoader
expr(
    "dl.basic",
    "list(pg.DataLoader(data_source=list(range(5)), sampler=sampler(5, num_epochs=1), worker_count=0))",
    timeout=20,
)
expr("dl.pg_alias", "grain.DataLoader is pg.DataLoader")
expr(
    "dl.range_source",
    "list(pg.DataLoader(data_source=grain.sources.RangeDataSource(0, 10, 3), sampler=sampler(4, num_epochs=1), worker_count=0))",
    timeout=20,
)


@case("dl.operations.map_filter_batch", timeout=20)
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 1

    class Even(grain.transforms.Filter):
        def filter(self, x):
            return x % 2 == 0

    loader = _loader(10, operations=[Plus(), Even(), grain.transforms.Batch(2)])
    out = list(loader)
    return {"value": out, "types": types_of(out)}


@case("dl.operations.batch_drop_remainder", timeout=20)
def _():
    return list(_loader(5, operations=[grain.transforms.Batch(2, drop_remainder=True)]))


@case("dl.operations.batch_fn", timeout=20)
def _():
    return list(_loader(5, operations=[grain.transforms.Batch(2, batch_fn=lambda xs: list(xs))]))


@case("dl.operations.two_batches", timeout=20)
def _():
    out = list(_loader(8, operations=[grain.transforms.Batch(2), grain.transforms.Batch(2)]))
    return {"value": out, "types": types_of(out)}


@case("dl.operations.map_operation", timeout=20)
def _():
    return list(_loader(4, operations=[pg.MapOperation(lambda x: x * 10)]))


@case("dl.operations.filter_operation", timeout=20)
def _():
    return list(_loader(6, operations=[pg.FilterOperation(lambda x: x % 3 == 0)]))


@case("dl.operations.batch_operation", timeout=20)
def _():
    out = list(_loader(5, operations=[pg.BatchOperation(batch_size=2)]))
    return {"value": out, "types": types_of(out)}


@case("dl.operations.batch_operation_drop", timeout=20)
def _():
    return list(_loader(5, operations=[pg.BatchOperation(batch_size=2, drop_remainder=True)]))


@case("dl.operations.random_map_operation", timeout=20)
def _():
    op = pg.RandomMapOperation(lambda x, rng: (x, int(rng.integers(0, 1))))
    smp = sampler(4, num_epochs=1, seed=1)
    return list(_loader(4, sampler=smp, operations=[op]))


@case("dl.operations.random_map_needs_seed", timeout=20)
def _():
    class R(grain.transforms.RandomMap):
        def random_map(self, x, rng):
            return x

    return list(_loader(3, operations=[R()]))


@case("dl.operations.mixed_operation_and_transform", timeout=20)
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 1

    return list(_loader(4, operations=[Plus(), pg.MapOperation(lambda x: x * 2)]))


@case("dl.operations.custom_operation", timeout=20)
def _():
    def op(records):
        for r in records:
            yield pg.Record(r.metadata, r.data * -1)

    return list(_loader(3, operations=[op]))


@case("dl.shuffle_sampler", timeout=20, shuffled=True)
def _():
    s = sampler(10, shuffle=True, seed=5, num_epochs=1)
    return list(_loader(10, sampler=s))


@case("dl.shuffle_sampler_deterministic", timeout=20)
def _():
    s = lambda: sampler(10, shuffle=True, seed=5, num_epochs=1)  # noqa: E731
    return list(_loader(10, sampler=s())) == list(_loader(10, sampler=s()))


@case("dl.two_epochs", timeout=20)
def _():
    return list(_loader(3, num_epochs=2))


@case("dl.infinite_epochs", timeout=20)
def _():
    s = sampler(3, num_epochs=None)
    return first(_loader(3, sampler=s), 7)


@case("dl.shard_options", timeout=20)
def _():
    s = sampler(10, num_epochs=1, shard_options=grain.sharding.ShardOptions(1, 3))
    return list(_loader(10, sampler=s))


@case("dl.shard_options_on_loader", timeout=20)
def _():
    s = sampler(10, num_epochs=1, shard_options=grain.sharding.ShardOptions(0, 2))
    return list(_loader(10, sampler=s, shard_options=grain.sharding.ShardOptions(0, 2)))


@case("dl.shard_options_loader_only", timeout=20)
def _():
    out = {}
    for i in range(3):
        loader = _loader(10, shard_options=grain.sharding.ShardOptions(i, 3))
        out[str(i)] = list(loader)
    return out


@case("dl.shard_partition_via_sampler", timeout=20)
def _():
    out = {}
    for i in range(3):
        s = sampler(10, num_epochs=1, shard_options=grain.sharding.ShardOptions(i, 3))
        out[str(i)] = list(_loader(10, sampler=s))
    return out


@case("dl.shard_partition_drop_remainder", timeout=20)
def _():
    out = {}
    for i in range(3):
        so = grain.sharding.ShardOptions(i, 3, drop_remainder=True)
        out[str(i)] = list(_loader(10, sampler=sampler(10, num_epochs=1, shard_options=so)))
    return out


@case("smp.index.defaults")
def _():
    s = grain.samplers.IndexSampler(5)
    return {"len": len(s), "first": s[0].record_key, "sixth": s[5].record_key}


@case("smp.sequential.defaults")
def _():
    s = grain.samplers.SequentialSampler(5)
    return {"len": len(s), "keys": [s[i].record_key for i in range(len(s))]}


@case("dl.read_options", timeout=20)
def _():
    return list(_loader(6, read_options=grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)))


@case("dl.read_options_zero_threads", timeout=20)
def _():
    return list(_loader(4, read_options=grain.ReadOptions(num_threads=0)))


@case("dl.multiprocessing_options", timeout=20)
def _():
    return _loader(4).multiprocessing_options


@case("dl.worker_count_one", timeout=60)
def _():
    return list(_loader(6, worker_count=1, operations=[grain.transforms.Batch(2)]))


@case("dl.worker_count_none", timeout=60)
def _():
    return len(list(_loader(4, worker_count=None)))


@case("dl.iterator.type", timeout=20)
def _():
    it = iter(_loader(3))
    return {
        "is_DataLoaderIterator": isinstance(it, grain.DataLoaderIterator),
        "is_PyGrainDatasetIterator": isinstance(it, pg.PyGrainDatasetIterator),
        "is_DatasetIterator": isinstance(it, grain.DatasetIterator),
    }


@case("dl.state.type_and_content", timeout=20)
def _():
    it = iter(_loader(6))
    take(it, 2)
    st = it.get_state()
    return {"type": type(st).__name__, "decoded": _decode_state(st)}


@case("dl.state.fresh", timeout=20)
def _():
    return _decode_state(iter(_loader(6)).get_state())


@case("dl.state.roundtrip", timeout=20)
def _():
    loader = _loader(10, operations=[grain.transforms.Batch(3)])
    it = iter(loader)
    next(it)
    st = it.get_state()
    rest = [b.tolist() for b in it]
    it2 = iter(loader)
    it2.set_state(st)
    return {"rest": rest, "resumed": [b.tolist() for b in it2]}


@case("dl.state.roundtrip_shuffled_epochs", timeout=20)
def _():
    s = sampler(5, shuffle=True, seed=2, num_epochs=3)
    loader = _loader(5, sampler=s)
    it = iter(loader)
    take(it, 7)
    st = it.get_state()
    rest = list(it)
    it2 = iter(loader)
    it2.set_state(st)
    return list(it2) == rest and len(rest) == 8


@case("dl.state.roundtrip_with_filter", timeout=20)
def _():
    class Even(grain.transforms.Filter):
        def filter(self, x):
            return x % 2 == 0

    loader = _loader(12, operations=[Even()])
    it = iter(loader)
    take(it, 2)
    st = it.get_state()
    rest = list(it)
    it2 = iter(loader)
    it2.set_state(st)
    return {"rest": rest, "resumed": list(it2)}


@case("dl.state.set_state_other_loader", timeout=20)
def _():
    it = iter(_loader(6))
    take(it, 2)
    st = it.get_state()
    other = _loader(6, sampler=sampler(6, shuffle=True, seed=9, num_epochs=1))
    it2 = iter(other)
    it2.set_state(st)
    return list(it2)


@case("dl.state.set_state_other_worker_count", timeout=60)
def _():
    it = iter(_loader(6))
    take(it, 2)
    st = it.get_state()
    it2 = iter(_loader(6, worker_count=1))
    it2.set_state(st)
    return list(it2)


@case("dl.iterator.exhausted", timeout=20)
def _():
    it = iter(_loader(2))
    list(it)
    try:
        next(it)
        return "value"
    except StopIteration:
        return "StopIteration"


@case("dl.iterator.two_iterators", timeout=20)
def _():
    loader = _loader(4)
    a, b = iter(loader), iter(loader)
    return [next(a), next(a), next(b)]


@case("dl.data_source_sequence_of_dicts", timeout=20)
def _():
    src = [{"x": np.array([i, i]), "y": i} for i in range(4)]
    out = list(_loader(4, data_source=src, operations=[grain.transforms.Batch(2)]))
    return {"value": out, "types": types_of(out)}


@case("dl.record_metadata_visible_to_operation", timeout=20)
def _():
    seen = []

    def op(records):
        for r in records:
            seen.append(
                {
                    "type": type(r).__name__,
                    "index": r.metadata.index,
                    "record_key": r.metadata.record_key,
                    "has_rng": r.metadata.rng is not None,
                }
            )
            yield r

    list(_loader(3, operations=[op]))
    return seen


# ------------------------------------------------------------------ grain.load
expr("load.basic", "list(grain.load(list(range(5)), num_epochs=1))", timeout=20)
expr(
    "load.batch",
    "[b.tolist() for b in grain.load(list(range(5)), num_epochs=1, batch_size=2)]",
    timeout=20,
)
expr(
    "load.batch_drop",
    "[b.tolist() for b in grain.load(list(range(5)), num_epochs=1, batch_size=2, drop_remainder=True)]",
    timeout=20,
)
expr(
    "load.shuffle_sorted",
    "sorted(grain.load(list(range(8)), num_epochs=1, shuffle=True, seed=3))",
    timeout=20,
)
expr(
    "load.shuffle",
    "list(grain.load(list(range(8)), num_epochs=1, shuffle=True, seed=3))",
    timeout=20,
    shuffled=True,
)
expr(
    "load.shard",
    "list(grain.load(list(range(10)), num_epochs=1, shard_options=grain.sharding.ShardOptions(1, 2)))",
    timeout=20,
)
expr(
    "load.returns_dataloader",
    "isinstance(grain.load(list(range(3)), num_epochs=1), grain.DataLoader)",
    timeout=20,
)
expr("load.infinite", "first(grain.load(list(range(3))), 7)", timeout=20)
expr("load.pg_alias", "grain.load is pg.load")


@case("load.transformations", timeout=20)
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 100

    return list(grain.load(list(range(3)), num_epochs=1, transformations=[Plus()]))


@case("load.read_options", timeout=20)
def _():
    return list(
        grain.load(list(range(3)), num_epochs=1, read_options=grain.ReadOptions(num_threads=1))
    )


# ------------------------------------------------------------------ samplers
expr("smp.index.len", "len(sampler(5, num_epochs=2))")
expr("smp.index.len_infinite", "len(sampler(5)) == sys.maxsize")
expr("smp.index.getitem", "sampler(5, num_epochs=1)[3]")


@case("smp.index.metadata_fields")
def _():
    m = sampler(5, num_epochs=2)[7]
    return {"type": type(m).__name__, "index": m.index, "record_key": m.record_key, "rng": m.rng}


@case("smp.index.sequence")
def _():
    s = sampler(4, num_epochs=2)
    return [s[i].record_key for i in range(8)]


@case("smp.index.getitem_past_end")
def _():
    return sampler(3, num_epochs=1)[3]


@case("smp.index.getitem_negative")
def _():
    return sampler(3, num_epochs=1)[-1]


@case("smp.index.shuffle_perm")
def _():
    s = sampler(10, shuffle=True, seed=1, num_epochs=2)
    keys = [s[i].record_key for i in range(20)]
    return {"e0": sorted(keys[:10]), "e1": sorted(keys[10:]), "differ": keys[:10] != keys[10:]}


@case("smp.index.shuffle_order", shuffled=True)
def _():
    s = sampler(10, shuffle=True, seed=1, num_epochs=1)
    return [s[i].record_key for i in range(10)]


@case("smp.index.rng_with_seed")
def _():
    s = sampler(4, num_epochs=1, seed=3)
    return {
        "type": type(s[0].rng).__name__,
        "same": int(s[0].rng.integers(0, 10**9))
        == int(sampler(4, num_epochs=1, seed=3)[0].rng.integers(0, 10**9)),
    }


@case("smp.index.sharded")
def _():
    out = {}
    for i in range(3):
        s = sampler(10, num_epochs=1, shard_options=grain.sharding.ShardOptions(i, 3))
        out[str(i)] = [s[j].record_key for j in range(len(s))]
    return out


@case("smp.index.sharded_drop_remainder")
def _():
    out = {}
    for i in range(3):
        so = grain.sharding.ShardOptions(i, 3, drop_remainder=True)
        s = sampler(10, num_epochs=1, shard_options=so)
        out[str(i)] = [s[j].record_key for j in range(len(s))]
    return out


@case("smp.index.sharded_index_field")
def _():
    s = sampler(10, num_epochs=1, shard_options=grain.sharding.ShardOptions(1, 2))
    return [[s[j].index, s[j].record_key] for j in range(len(s))]


@case("smp.index.sharded_two_epochs")
def _():
    s = sampler(5, num_epochs=2, shard_options=grain.sharding.ShardOptions(1, 2))
    return {"len": len(s), "keys": [s[j].record_key for j in range(len(s))]}


@case("smp.index.more_shards_than_records")
def _():
    s = sampler(2, num_epochs=1, shard_options=grain.sharding.ShardOptions(2, 3))
    return {"len": len(s), "keys": [s[j].record_key for j in range(len(s))]}


@case("smp.index.repr_fields")
def _():
    s = sampler(7, shuffle=True, seed=3, num_epochs=2)
    return {
        k: getattr(s, k, "<absent>")
        for k in ("num_records", "shuffle", "seed", "num_epochs", "shard_options")
    }


@case("smp.index.pickle")
def _():
    import pickle

    s = sampler(7, shuffle=True, seed=3, num_epochs=1)
    s2 = pickle.loads(pickle.dumps(s))
    return [s[i].record_key for i in range(7)] == [s2[i].record_key for i in range(7)]


expr("smp.sequential.len", "len(grain.samplers.SequentialSampler(5))")
expr(
    "smp.sequential.items", "[grain.samplers.SequentialSampler(5)[i].record_key for i in range(5)]"
)
expr("smp.sequential.past_end", "grain.samplers.SequentialSampler(3)[3]")
expr(
    "smp.sequential.sharded",
    "[m.record_key for m in (grain.samplers.SequentialSampler(10, shard_options=grain.sharding.ShardOptions(1, 3))[i] for i in range(len(grain.samplers.SequentialSampler(10, shard_options=grain.sharding.ShardOptions(1, 3)))))]",
)
expr("smp.sequential.seed_rng", "type(grain.samplers.SequentialSampler(3, seed=1)[0].rng).__name__")
expr(
    "smp.sequential.in_dataloader",
    "list(pg.DataLoader(data_source=list('abc'), sampler=grain.samplers.SequentialSampler(3), worker_count=0))",
    timeout=20,
)
expr(
    "smp.sampler_protocol",
    "[isinstance(sampler(3), grain.samplers.Sampler), isinstance(grain.samplers.SequentialSampler(3), grain.samplers.Sampler)]",
)

# ------------------------------------------------------------------ sharding
expr("shard.options.fields", "grain.sharding.ShardOptions(1, 4)")
expr(
    "shard.options.kw",
    "grain.sharding.ShardOptions(shard_index=0, shard_count=2, drop_remainder=True)",
)
expr("shard.options.eq", "grain.sharding.ShardOptions(0, 2) == grain.sharding.ShardOptions(0, 2)")
expr(
    "shard.options.hashable",
    "hash(grain.sharding.ShardOptions(0, 2)) == hash(grain.sharding.ShardOptions(0, 2))",
)
expr(
    "shard.options.frozen",
    "outcome(lambda: setattr(grain.sharding.ShardOptions(0, 2), 'shard_index', 1))",
)
expr("shard.no_sharding", "grain.sharding.NoSharding()")
expr(
    "shard.no_sharding_is_shard_options",
    "isinstance(grain.sharding.NoSharding(), grain.sharding.ShardOptions)",
)
expr("shard.no_sharding_eq", "grain.sharding.NoSharding() == grain.sharding.ShardOptions(0, 1)")
expr("shard.by_jax_process", "grain.sharding.ShardByJaxProcess()", timeout=30)
expr(
    "shard.by_jax_process_drop",
    "grain.sharding.ShardByJaxProcess(drop_remainder=True).drop_remainder",
    timeout=30,
)
expr(
    "shard.pg_aliases",
    "[pg.ShardOptions is grain.sharding.ShardOptions, pg.NoSharding is grain.sharding.NoSharding, pg.ShardByJaxProcess is grain.sharding.ShardByJaxProcess]",
)


@case("shard.map_dataset_slice_pattern")
def _():
    so = grain.sharding.ShardOptions(1, 3)
    ds = grain.MapDataset.range(10)
    return list(ds[so.shard_index :: so.shard_count])


# ------------------------------------------------------------------ operations as objects
expr(
    "ops.batch_operation_fields",
    "[pg.BatchOperation(batch_size=3).batch_size, pg.BatchOperation(batch_size=3).drop_remainder]",
)
expr(
    "ops.map_operation_call",
    "[r.data for r in pg.MapOperation(lambda x: x + 1)(iter([pg.Record(pg.RecordMetadata(0, 0), 1), pg.Record(pg.RecordMetadata(1, 1), 5)]))]",
)
expr(
    "ops.filter_operation_call",
    "[r.data for r in pg.FilterOperation(lambda x: x > 2)(iter([pg.Record(pg.RecordMetadata(i, i), i) for i in range(5)]))]",
)
expr(
    "ops.batch_operation_call",
    "[r.data.tolist() for r in pg.BatchOperation(batch_size=2)(iter([pg.Record(pg.RecordMetadata(i, i), i) for i in range(5)]))]",
)
expr(
    "ops.batch_operation_call_metadata",
    "[[r.metadata.index, r.metadata.record_key] for r in pg.BatchOperation(batch_size=2)(iter([pg.Record(pg.RecordMetadata(i, i * 10), i) for i in range(5)]))]",
)
expr("ops.operation_protocol", "isinstance(pg.MapOperation(lambda x: x), pg.Operation)")


@case("ops.random_map_operation_call")
def _():
    op = pg.RandomMapOperation(lambda x, rng: type(rng).__name__)
    recs = [pg.Record(pg.RecordMetadata(i, i, rng=np.random.default_rng(i)), i) for i in range(2)]
    return [r.data for r in op(iter(recs))]


@case("ops.pack_and_batch_call")
def _():
    op = grain.experimental.PackAndBatchOperation(length_struct={"t": 4}, batch_size=2)
    recs = [
        pg.Record(pg.RecordMetadata(i, i), {"t": np.arange(n, dtype=np.int32)})
        for i, n in enumerate([2, 2, 3, 1])
    ]
    out = [r.data for r in op(iter(recs))]
    return {"value": out, "types": types_of(out)}


_ = (L, state_shape)
