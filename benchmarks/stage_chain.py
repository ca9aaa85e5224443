"""What a stage itself costs: chains of stages that do almost nothing, JSON lines.

Usage: python benchmarks/stage_chain.py [--repeats 7] [--size 200000] [--label NAME]

The elements are ints and every transformation is the identity, so the time is
the pipeline's own per-element cost: the stage iterators' ``__next__``, the
guard's entry in front of each (grain_dataset._runtime._guard), the read-ahead's chunks.
It is the benchmark to run before and after a change to the bases or the stage
contract (grain_dataset._common._contract): a change that adds work per element per
stage shows here first. Cases:

  iter_maps_5    to_iter_dataset(0 threads) then 5 IterDataset maps
  iter_mixed_5   to_iter_dataset(0 threads) then map, filter(all pass),
                 map_with_index, filter(all pass), map
  map_maps_5     5 MapDataset maps, read by to_iter_dataset(0 threads)

Each line: the median of `repeats` full passes, elements/s and ns per element (wall and CPU),
the median latency of the first element of a fresh iterator (µs), and the
process's peak resident memory. Compare
two trees by running this script under each, interleaved (``--label`` names
the tree in the output); the repository's A/B numbers are in the report of the
change that asked for them.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

from _bench_common import grain_version, implementation

import grain


def _same(x: Any) -> Any:
    return x


def _keep(x: Any) -> bool:
    return True


def _same_with_index(i: int, x: Any) -> Any:
    return x


def _read(n: int) -> grain.IterDataset:
    return grain.MapDataset.range(n).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=64)
    )


def _iter_maps_5(n: int) -> grain.IterDataset:
    ds = _read(n)
    for _ in range(5):
        ds = ds.map(_same)
    return ds


def _iter_mixed_5(n: int) -> grain.IterDataset:
    return (
        _read(n).map(_same).filter(_keep).map_with_index(_same_with_index).filter(_keep).map(_same)
    )


def _map_maps_5(n: int) -> grain.IterDataset:
    ds = grain.MapDataset.range(n)
    for _ in range(5):
        ds = ds.map(_same)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=64))


CASES: dict[str, Callable[[int], grain.IterDataset]] = {
    "iter_maps_5": _iter_maps_5,
    "iter_mixed_5": _iter_mixed_5,
    "map_maps_5": _map_maps_5,
}


def _one_pass(ds: grain.IterDataset) -> tuple[float, float, float, int]:
    """(seconds for the whole pass, its CPU seconds, seconds to the first element, elements).

    CPU seconds (this thread's; no stage here starts a thread) are what a shared,
    loaded machine disturbs least: waiting for a core does not count.
    """
    start, cpu_start = time.perf_counter(), time.thread_time()
    it = iter(ds)
    next(it)
    first = time.perf_counter() - start
    count = 1
    for _ in it:
        count += 1
    return time.perf_counter() - start, time.thread_time() - cpu_start, first, count


def measure(name: str, size: int, repeats: int, label: str) -> dict[str, Any]:
    build = CASES[name]
    _one_pass(build(min(size, 1000)))  # warm-up: imports, first-call caches
    totals, cpus, firsts = [], [], []
    count = 0
    for _ in range(repeats):
        total, cpu, first, count = _one_pass(build(size))
        totals.append(total)
        cpus.append(cpu)
        firsts.append(first)
    seconds = statistics.median(totals)
    return {
        "benchmark": "stage_chain",
        "case": name,
        "implementation": implementation(),
        "grain_version": grain_version(),
        "label": label,
        "ok": count == size,
        "median_s": round(seconds, 6),
        "elements": count,
        "repeats": repeats,
        "elements_per_s": round(count / seconds),
        "ns_per_element": round(seconds / count * 1e9, 1),
        "cpu_ns_per_element": round(statistics.median(cpus) / count * 1e9, 1),
        "first_element_us": round(statistics.median(firsts) * 1e6, 1),
        # The process's peak so far (Linux: KiB): the pipeline keeps no more than a
        # read-ahead chunk, so this is mostly the interpreter and its imports.
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    for name in args.case or sorted(CASES):
        print(json.dumps(measure(name, args.size, args.repeats, args.label)), flush=True)


if __name__ == "__main__":
    main()
