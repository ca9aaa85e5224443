"""DataLoader states in Grain's keys, Grain-written states, the sampler/source rule, ElasticIterator.

Grain's keys (`version`, `last_seen_indices`, `last_worker_index`, `worker_count`)
are compared where both loaders produce the same order (0 or 1 worker, or 2
workers without batches). Where upstream's batches depend on its worker count,
the batches are recorded (a stated difference: ours do not). The ElasticIterator
cases compare states without the pipeline fingerprint, which is the dataset
layer's (its placement is compared by the `state.*` cases).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import grain
import grain.python as pg
from _registry import L, case, sampler, take

_GRAIN_KEYS = ("version", "last_seen_indices", "last_worker_index", "worker_count")


def _loader(n: int = 10, ops: Any = (), workers: int = 0, **kw: Any) -> Any:
    return pg.DataLoader(
        data_source=kw.pop("data_source", pg.RangeDataSource(0, n, 1)),
        sampler=kw.pop("sampler", None) or sampler(n, num_epochs=2, shuffle=False, seed=0),
        operations=list(ops),
        worker_count=workers,
    )


def _keys(state: bytes) -> dict[str, Any]:
    decoded = json.loads(state)
    return {key: decoded[key] for key in (*_GRAIN_KEYS, "sampler", "data_source")}


def _plain(x: Any) -> Any:
    return np.asarray(x).tolist()


def _keys_over_time(loader: Any, steps: int) -> list[Any]:
    it = iter(loader)
    out = [_keys(it.get_state())]
    for _ in range(steps):
        out.append([_plain(next(it)), _keys(it.get_state())])
    return out


@case("dlstate.keys.w0_no_batch", timeout=20)
def _():
    return _keys_over_time(_loader(), 12)


@case("dlstate.keys.w0_batch3_across_epochs", timeout=20)
def _():
    return _keys_over_time(_loader(ops=[pg.Batch(3)]), 6)


@case("dlstate.keys.w1_batch3", timeout=60)
def _():
    return _keys_over_time(_loader(ops=[pg.Batch(3)], workers=1), 5)


@case("dlstate.keys.w2_no_batch", timeout=60)
def _():
    return _keys_over_time(_loader(workers=2), 5)


@case("dlstate.keys.sharded_sampler", timeout=20)
def _():
    s = sampler(10, num_epochs=1, shuffle=False, seed=0, shard_options=pg.ShardOptions(1, 2))
    return _keys_over_time(_loader(ops=[pg.Batch(2)], sampler=s), 3)


@case("dlstate.keys.filter_batch", timeout=20)
def _():
    class Odd(grain.transforms.Filter):
        def filter(self, x):
            return x % 2 == 1

    return _keys_over_time(_loader(ops=[Odd(), pg.Batch(2)]), 3)


@case("dlstate.worker_count.keys_w2_batch3", timeout=60)
def _():
    return _keys_over_time(_loader(ops=[pg.Batch(3)], workers=2), 3)


@case("dlstate.worker_count.batches_differ", timeout=90)
def _():
    # The stated difference: upstream's batches depend on worker_count, ours do not.
    return {w: [_plain(b) for b in _loader(ops=[pg.Batch(3)], workers=w)] for w in (0, 1, 2)}


@case("dlstate.edit.last_seen_no_batch", timeout=20)
def _():
    # AirIO: last_seen_indices["0"] = 1 means "two elements read".
    loader = _loader()
    state = json.loads(iter(loader).get_state())
    state["last_seen_indices"]["0"] = 1
    it = iter(loader)
    it.set_state(json.dumps(state).encode())
    return take(it, 3)


@case("dlstate.edit.last_seen_batch_end", timeout=20)
def _():
    loader = _loader(ops=[pg.Batch(3)])
    state = json.loads(iter(loader).get_state())
    state["last_seen_indices"]["0"] = 5
    it = iter(loader)
    it.set_state(json.dumps(state).encode())
    return [_plain(b) for b in take(it, 3)]


@case("dlstate.roundtrip.w0_batch3", timeout=20)
def _():
    loader = _loader(ops=[pg.Batch(3)])
    it = iter(loader)
    take(it, 4)
    state = it.get_state()
    rest = [_plain(b) for b in it]
    it2 = iter(loader)
    it2.set_state(state)
    return {"rest": rest, "resumed": [_plain(b) for b in it2]}


@case("dlstate.sampler_larger_than_source", timeout=20)
def _():
    s = sampler(13, num_epochs=1, shuffle=False, seed=0)
    return L(pg.DataLoader(data_source=list(range(10)), sampler=s, worker_count=0))


@case("dlstate.sampler_larger_than_source_batched", timeout=60)
def _():
    s = sampler(13, num_epochs=2, shuffle=False, seed=0)
    loader = pg.DataLoader(
        data_source=pg.RangeDataSource(0, 10, 1),
        sampler=s,
        operations=[pg.Batch(4)],
        worker_count=1,
    )
    return [_plain(b) for b in loader]


def _elastic(ds: Any, batch: int, index: int, count: int) -> Any:
    return grain.experimental.ElasticIterator(ds, batch, grain.sharding.ShardOptions(index, count))


def _positions(state: Any) -> Any:
    return {k: v for k, v in state.items() if k != "grain_fingerprint"}


@case("dlstate.elastic_state.same_on_every_shard", timeout=30)
def _():
    ds = grain.MapDataset.range(40)
    shards = [_elastic(ds, 8, i, 2) for i in range(2)]
    out = [[_positions(it.get_state()) for it in shards]]
    for _ in range(3):
        batches = [_plain(next(it)) for it in shards]
        out.append([batches, [_positions(it.get_state()) for it in shards]])
    return out


@case("dlstate.elastic_state.one_state_restores_other_counts", timeout=30)
def _():
    ds = grain.MapDataset.range(40)
    it = _elastic(ds, 8, 1, 2)
    take(it, 3)
    state = it.get_state()
    out = {}
    for count in (1, 4):
        restored = []
        for index in range(count):
            shard = _elastic(ds, 8, index, count)
            shard.set_state(state)
            restored.append([_plain(b) for b in take(shard, 1)])
        out[count] = restored
    return out


@case("dlstate.elastic_state.end_of_data", timeout=30)
def _():
    it = _elastic(grain.MapDataset.range(10), 4, 0, 2)
    return {"batches": [_plain(b) for b in it], "state": _positions(it.get_state())}


def _grain_literal(seen: int, shuffle: bool) -> bytes:
    """A DataLoader state as Grain 0.2.18 writes it (worker_count 0, RangeDataSource(0, 10))."""
    s = sampler(10, num_epochs=2, shuffle=shuffle, seed=0)
    state = {
        "version": 2,
        "last_seen_indices": {"0": seen},
        "last_worker_index": -1,
        "worker_count": 0,
        "sampler": repr(s),
        "data_source": "RangeDataSource(start=0, stop=10, step=1)",
    }
    return json.dumps(state, indent=4).encode()


@case("dlstate.grain_literal.unshuffled", timeout=20)
def _():
    # The same order on both sides: a Grain-written state continues at the same batch.
    it = iter(_loader(ops=[pg.Batch(3)]))
    it.set_state(_grain_literal(5, shuffle=False))
    return [_plain(b) for b in it]


@case("dlstate.grain_literal.shuffled", timeout=20)
def _():
    s = sampler(10, num_epochs=2, shuffle=True, seed=0)
    it = iter(_loader(ops=[pg.Batch(3)], sampler=s))
    it.set_state(_grain_literal(5, shuffle=True))
    return len(L(it))
