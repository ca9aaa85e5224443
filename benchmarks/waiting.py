"""Elements that wait (I/O) read by many threads, batched, as JSON lines.

Usage: python benchmarks/waiting.py [--repeats 3] [--size 3072] [--wait-ms 2]
       [--threads 8,16] [--shapes mapbatch,iterbatch]

Runs unchanged against this workspace's `grain` and against upstream grain==0.2.18
(`benchmarks/compare.py --bench waiting` runs it under both): public API only. Each
element waits `wait-ms` (a sleep, as a read from an object store or a network disk
waits) and is then a 150,528-byte array (a 224x224x3 image); batches of 128. Waiting
threads use no core, so threads pay here up to their number even on 2 cores: what
is measured is whether a read-ahead gives elements that wait the threads it was
allowed, from the start, as a host with many cores would give elements that compute.

  mapbatch   MapDataset.range(n).map(wait).batch(128).to_iter_dataset(options)
  iterbatch  MapDataset.range(n).map(wait).to_iter_dataset(options).batch(128)

A case is ``SHAPE_tT`` with ``ReadOptions(num_threads=T)``. One timed run reads
`size` elements from ``iter()`` on, the start included; a line is the median of
`repeats` runs (taken round the cases), with the time to the first batch and
`ideal_per_s`, T threads each waiting all the time (T / wait). Every batch is
checked against the values its positions give (`ok`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _bench_common import grain_version, implementation

import grain

BATCH = 128
ELEMENT_BYTES = 224 * 224 * 3
SHAPES = ("mapbatch", "iterbatch")


def _waiting(seconds: float) -> Any:
    def element(index: int) -> np.ndarray:
        time.sleep(seconds)
        return np.full(ELEMENT_BYTES, index % 251, np.uint8)

    return element


def _pipeline(size: int, shape: str, threads: int, seconds: float) -> Any:
    options = grain.ReadOptions(num_threads=threads)
    ds = grain.MapDataset.range(size).map(_waiting(seconds))
    if shape == "mapbatch":
        return ds.batch(BATCH, drop_remainder=True).to_iter_dataset(options)
    return ds.to_iter_dataset(options).batch(BATCH, drop_remainder=True)


def _run(ds: Any, batches: int) -> tuple[float, float, bool]:
    """Seconds to the first batch and to `batches` batches, and whether all were right."""
    start = time.perf_counter()
    iterator = iter(ds)
    first, ok = 0.0, True
    for b in range(batches):
        batch = next(iterator)
        if not b:
            first = time.perf_counter() - start
        want = (np.arange(b * BATCH, (b + 1) * BATCH) % 251).astype(np.uint8)
        ok = (
            ok
            and batch.shape == (BATCH, ELEMENT_BYTES)
            and bool((batch[:, ::4099] == want[:, None]).all())
        )
    elapsed = time.perf_counter() - start
    del iterator
    return first, elapsed, ok


def _ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=3072, help="elements per run (whole batches)")
    parser.add_argument("--wait-ms", type=float, default=2.0)
    parser.add_argument("--threads", default="8,16")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.size < BATCH or args.wait_ms <= 0:
        parser.error(f"--repeats and --wait-ms must be positive and --size at least {BATCH}")
    shapes = [s for s in args.shapes.split(",") if s]
    if not set(shapes) <= set(SHAPES):
        parser.error(f"--shapes: choose from {SHAPES}")
    threads = _ints(args.threads)
    if not threads or min(threads) < 1:
        parser.error("--threads: one or more positive counts")
    seconds = args.wait_ms / 1000
    batches = args.size // BATCH
    size = batches * BATCH
    cases = [f"{shape}_t{t}" for shape in shapes for t in threads]
    pipelines = {}
    for case in cases:
        shape, t = case.split("_t")
        pipelines[case] = _pipeline(size, shape, int(t), seconds)
        _run(pipelines[case], 1)  # warm-up: imports, first code paths
    digest = hashlib.sha256(f"{size}/{BATCH}".encode()).hexdigest()[:16]
    firsts: dict[str, list[float]] = {case: [] for case in cases}
    times: dict[str, list[float]] = {case: [] for case in cases}
    ok = dict.fromkeys(cases, True)
    for _ in range(args.repeats):
        for case in cases:  # round the cases: the machine's drift reaches each alike
            first, elapsed, right = _run(pipelines[case], batches)
            firsts[case].append(first)
            times[case].append(elapsed)
            ok[case] = ok[case] and right
    for case in cases:
        shape, t = case.split("_t")
        median = statistics.median(times[case])
        line = {
            "benchmark": "waiting",
            "case": case,
            "implementation": implementation(),
            "grain_version": grain_version(),
            "python": sys.version.split()[0],
            "shape": shape,
            "read_threads": int(t),
            "wait_ms": args.wait_ms,
            "elements": size,
            "median_s": round(median, 6),
            "elements_per_s": round(size / median, 1),
            "ideal_per_s": round(int(t) / seconds, 1),
            "first_batch_s": round(statistics.median(firsts[case]), 4),
            "ok": bool(ok[case]),
            "digest": digest,
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
