"""Batches stacked straight into a worker's shared memory, or copied: an A/B for developers.

Usage: uv run python packages/grain-mp/tools/stack_into_shm_ab.py [--batches 20] [--repeats 5]

Prints JSON lines. (1) 38.5 MB batches (256 ready 224x224x3 uint8 images, made once
per process, `MapDataset.batch(256)`) through 2 workers, with the batches stacked
straight into shared memory (``new``) and, interleaved in the same run, stacked
into numpy memory and copied into a segment by the transport (``old``): the private
flag ``grain_mp._mp_worker._STACK_INTO_SHM``, which the forked workers inherit.
Each line: MB/s from the first batch on, time to the first batch, CPU time per
batch of the parent and of the workers (start-up included), medians of the
repeats. (2) The worker's own time per batch, in one process: `stack` of the 256
images, then `SegmentPool.encode` of the batch, old (no allocator) and new
(`SegmentPool.empty` installed), medians of interleaved repeats.

It reaches into grain_mp's private modules (the flag, the pool), so it lives beside
grain-mp and not in benchmarks/, whose scripts also run under upstream Grain.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import grain
from grain_dataset import stack
from grain_dataset.extension import set_batch_allocator
from grain_mp import _mp_worker
from grain_mp._segment_pool import SegmentPool
from grain_mp._segment_reader import SegmentReader


def _emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _children_cpu() -> float:
    """User and system seconds of this process's reaped children (the ended workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


LARGE_BATCH = 256
LARGE_SHAPE = (224, 224, 3)
_LARGE: list[np.ndarray] = []


def _large_image(index: int) -> np.ndarray:
    """One of 16 ready 224x224x3 images (made once per process); its first pixel is index % 16."""
    if not _LARGE:
        _LARGE.extend(np.full(LARGE_SHAPE, k, dtype=np.uint8) for k in range(16))
    return _LARGE[index % 16]


def _large_ok(batch: np.ndarray, index: int) -> bool:
    start = index * LARGE_BATCH
    firsts = batch[:, 0, 0, 0].astype(np.int64)
    expected = (np.arange(start, start + LARGE_BATCH) % 16).astype(np.int64)
    return batch.shape == (LARGE_BATCH, *LARGE_SHAPE) and bool((firsts == expected).all())


def _large_batches(args: argparse.Namespace) -> None:
    batches = args.batches
    nbytes = LARGE_BATCH * int(np.prod(LARGE_SHAPE))
    ds = (
        grain.MapDataset.range(batches * LARGE_BATCH)
        .map(_large_image)
        .batch(LARGE_BATCH)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    results: dict[str, dict[str, list[float]]] = {}
    ok = True
    default = _mp_worker._STACK_INTO_SHM
    try:
        for _ in range(args.repeats):
            for mode in ("old", "new"):
                _mp_worker._STACK_INTO_SHM = mode == "new"  # forked workers inherit it
                cpu_before, children_before = time.process_time(), _children_cpu()
                begin = time.perf_counter()
                start = 0.0
                count = 0
                for i, batch in enumerate(ds):
                    if not i:
                        start = time.perf_counter()
                        first = start - begin
                    ok = ok and _large_ok(batch, i)
                    count += 1
                    del batch
                wall = time.perf_counter() - start
                ok = ok and count == batches
                result = results.setdefault(mode, {})
                result.setdefault("walls", []).append(wall)
                result.setdefault("firsts", []).append(first)
                result.setdefault("parent", []).append((time.process_time() - cpu_before) / count)
                result.setdefault("workers", []).append((_children_cpu() - children_before) / count)
    finally:
        _mp_worker._STACK_INTO_SHM = default
    for mode in ("old", "new"):
        result = results[mode]
        _emit(
            {
                "case": f"large_batches_38mb_workers_2_{mode}",
                "batches": batches,
                "mb_per_s": round(
                    (batches - 1) * nbytes / 1e6 / statistics.median(result["walls"]), 1
                ),
                "first_batch_s": round(statistics.median(result["firsts"]), 4),
                "parent_cpu_ms_per_batch": round(statistics.median(result["parent"]) * 1e3, 2),
                "workers_cpu_ms_per_batch": round(statistics.median(result["workers"]) * 1e3, 2),
                "ok": bool(ok),
            }
        )
    # The worker's own time per batch, in one process: stacking, then encoding it.
    images = [_large_image(i) for i in range(LARGE_BATCH)]
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader(release=pool.reclaim)
    times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    clock = time.perf_counter
    try:
        for _ in range(max(5, 3 * args.repeats)):
            for mode in ("old", "new"):
                set_batch_allocator(pool.empty if mode == "new" else None)
                began = clock()
                batch = stack(images)
                stacked = clock()
                payload = pool.encode(batch)
                encoded = clock()
                del batch
                element = reader.decode(payload, copy=False)  # the parent's zero-copy view
                ok = ok and _large_ok(element, 0)
                del element
                reader.take_released()  # hands the name back (the release callback)
                times[mode].setdefault("stack", []).append(stacked - began)
                times[mode].setdefault("encode", []).append(encoded - stacked)
                times[mode].setdefault("total", []).append(encoded - began)
    finally:
        set_batch_allocator(None)
        reader.close()
        pool.close()
    medians = {
        mode: {part: statistics.median(values) * 1e3 for part, values in parts.items()}
        for mode, parts in times.items()
    }
    _emit(
        {
            "case": "worker_time_per_38mb_batch",
            **{
                f"{mode}_{part}_ms": round(ms, 2)
                for mode, parts in medians.items()
                for part, ms in parts.items()
            },
            "new_over_old_total": round(medians["new"]["total"] / medians["old"]["total"], 3),
            "ok": bool(ok),
        }
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="batches per pass")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    _emit({"case": "uptime", "load": [round(x, 2) for x in os.getloadavg()]})
    _large_batches(args)


if __name__ == "__main__":
    sys.exit(main())
