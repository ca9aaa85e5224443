"""The cost of elasticity: ElasticIterator against the plain sharded pipeline, JSON lines.

Usage: python benchmarks/elastic.py [--repeats 7] [--size 200000] [--shards 64]

Cases (one JSON line each):

  throughput_<pipeline>   shard 0 of 4, 32 elements per shard and step, one pass
                          each of ``ds[0::4].to_iter_dataset(ro).batch(32, True)`` (the
                          plain pipeline) and ``ElasticIterator(ds, 128, ShardOptions(0,
                          4), read_options=ro)``, alternating, median over the repeats;
                          pipelines: ``map`` (range -> shuffle -> map) and ``filter``
                          (the same with a filter keeping half), ``decode`` (1 KB
                          records decoded to float32 arrays). Target: >= 0.9x plain.
  state_bytes             the JSON size of one shard's state with `--shards` shards:
                          fresh, and after two resizes (64 -> 48 -> 64, one step each,
                          filter keeping half: the worst band of leftovers).
  restore                 the median time for one new shard of `--shards` to take the
                          list of all old shards' states and deliver its first batch,
                          and for `set_state` alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import grain
from grain.experimental import ElasticIterator

RO = grain.ReadOptions(num_threads=0)
SHARDS = 4
BATCH = 32


def _keep_half(x: int) -> bool:
    return x % 2 == 0


def _map(n: int) -> grain.MapDataset:
    return grain.MapDataset.range(n).shuffle(seed=0).map(lambda x: x + 1)


def _filter(n: int) -> grain.MapDataset:
    return _map(n).filter(_keep_half)


def _decode(n: int) -> grain.MapDataset:
    records = [np.full(256, i, dtype=np.int32).tobytes() for i in range(n)]
    return (
        grain.MapDataset.source(records)
        .shuffle(seed=0)
        .map(lambda r: np.frombuffer(r, dtype=np.int32).astype(np.float32) / 255.0)
    )


CASES: dict[str, Callable[[int], grain.MapDataset]] = {
    "map": _map,
    "filter": _filter,
    "decode": _decode,
}


def _pass(iterator: Any) -> tuple[float, int]:
    start = time.perf_counter()
    count = sum(1 for _ in iterator)
    return time.perf_counter() - start, count


def _plain(ds: grain.MapDataset) -> Any:
    return iter(ds[0::SHARDS].to_iter_dataset(RO).batch(BATCH, drop_remainder=True))


def _elastic(ds: grain.MapDataset, shards: int = SHARDS, index: int = 0) -> ElasticIterator:
    return ElasticIterator(
        ds, BATCH * shards, grain.sharding.ShardOptions(index, shards), read_options=RO
    )


def throughput(name: str, size: int, repeats: int) -> dict[str, Any]:
    ds = CASES[name](size)
    _pass(_plain(ds)), _pass(_elastic(ds))  # warm-up
    plain, elastic, ok = [], [], True
    for _ in range(repeats):
        seconds, batches_plain = _pass(_plain(ds))
        plain.append(seconds)
        seconds, batches_elastic = _pass(_elastic(ds))
        elastic.append(seconds)
        ok = ok and batches_plain == batches_elastic > 0
    plain_s, elastic_s = statistics.median(plain), statistics.median(elastic)
    elements = batches_plain * BATCH
    return {
        "case": f"throughput_{name}",
        "elements": elements,
        "plain_elements_per_s": round(elements / plain_s),
        "elastic_elements_per_s": round(elements / elastic_s),
        "ratio": round(plain_s / elastic_s, 4),
        "target": 0.9,
        "ok": ok,
    }


def _step_all(iterators: list[ElasticIterator]) -> list[dict[str, Any]]:
    for it in iterators:
        next(it)
    return [it.get_state() for it in iterators]


def state_and_restore(size: int, shards: int, repeats: int) -> list[dict[str, Any]]:
    ds = _filter(max(size, shards * BATCH * 16))  # enough for every step below
    fresh = _step_all([_elastic(ds, shards, i) for i in range(shards)])
    states = fresh
    for count in (shards * 3 // 4, shards):
        iterators = [_elastic(ds, count, i) for i in range(count)]
        for it in iterators:
            it.set_state(states)
        states = _step_all(iterators)
    sizes = [len(json.dumps(state)) for state in states]
    lines = [
        {
            "case": "state_bytes",
            "shards": shards,
            "fresh_bytes": len(json.dumps(fresh[0])),
            "after_resizes_max_bytes": max(sizes),
            "after_resizes_median_bytes": statistics.median(sizes),
            "leftover_runs": len(states[0]["leftovers"]),
            "ok": True,
        }
    ]
    text = json.dumps(states)  # restore from what a checkpoint holds
    restore_s, first_batch_s = [], []
    for repeat in range(repeats):
        it = _elastic(ds, shards // 2, repeat % (shards // 2))
        start = time.perf_counter()
        it.set_state(json.loads(text))
        restore_s.append(time.perf_counter() - start)
        next(it)
        first_batch_s.append(time.perf_counter() - start)
        it.close()
    lines.append(
        {
            "case": "restore",
            "old_shards": shards,
            "new_shards": shards // 2,
            "set_state_median_ms": round(1000 * statistics.median(restore_s), 3),
            "to_first_batch_median_ms": round(1000 * statistics.median(first_batch_s), 3),
            "ok": True,
        }
    )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=64)
    args = parser.parse_args(argv)
    for name in CASES:
        size = args.size // 10 if name == "decode" else args.size
        print(json.dumps(throughput(name, size, args.repeats)), flush=True)
    for line in state_and_restore(args.size, args.shards, args.repeats):
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
