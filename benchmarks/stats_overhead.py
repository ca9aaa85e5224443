"""What per-stage statistics cost: pipeline throughput with recording on and off, JSON lines.

Usage: python benchmarks/stats_overhead.py [--repeats 7] [--size 200000]

Each case builds the same pipeline twice, once plain and once inside
``WithOptionsIterDataset(ds, DatasetOptions(execution_tracking_mode="stage_timing"))``,
and times one full pass of each, alternating (off, on, off, on, ...) so that drift
on a noisy machine hits both alike. A line per case gives both medians and
``cost`` = on / off - 1. Recording adds a fixed ~0.1 us per element per
stage (one Python call), so the relative cost depends on what the stages do: the
target (<= 0.05) is for a pipeline whose elements cost real work (``decode``);
``light`` is the worst case, reported without a target. The cases:

  light     range -> shuffle -> map(+1) -> to_iter_dataset(0 threads) -> map(*2)
            -> filter(even) -> batch(32): stages doing almost nothing, the worst case
            for a per-element timer
  decode    the same records as 1 KB bytes, decoded with np.frombuffer and normalised
            to float32 in an IterDataset map, then batch(32): a realistic element cost
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

ON = grain.experimental.DatasetOptions(execution_tracking_mode="stage_timing")


def _light(n: int) -> grain.IterDataset:
    return (
        grain.MapDataset.range(n)
        .seed(0)
        .shuffle()
        .map(lambda x: x + 1)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .map(lambda x: x * 2)
        .filter(lambda x: x % 4 == 0)
        .batch(32)
    )


def _decode(n: int) -> grain.IterDataset:
    records = [np.full(256, i, dtype=np.int32).tobytes() for i in range(n)]
    return (
        grain.MapDataset.source(records)
        .seed(0)
        .shuffle()
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .map(lambda r: np.frombuffer(r, dtype=np.int32).astype(np.float32) / 255.0)
        .batch(32)
    )


CASES: dict[str, Callable[[int], grain.IterDataset]] = {"light": _light, "decode": _decode}
TARGETS: dict[str, float | None] = {"light": None, "decode": 0.05}


def _pass(ds: Any) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    for _ in ds:
        count += 1
    return time.perf_counter() - start, count


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=200_000)
    args = parser.parse_args(argv)
    for name, build in CASES.items():
        plain = build(args.size)
        tracked = grain.experimental.WithOptionsIterDataset(build(args.size), ON)
        _pass(plain), _pass(tracked)  # warm-up
        off, on, ok = [], [], True
        for _ in range(args.repeats):
            seconds, count_off = _pass(plain)
            off.append(seconds)
            seconds, count_on = _pass(tracked)
            on.append(seconds)
            ok = ok and count_off == count_on > 0
        it = iter(tracked)
        next(it)
        ok = ok and len(it.stats().stages) > 0
        off_s, on_s = statistics.median(off), statistics.median(on)
        line = {
            "case": name,
            "elements": args.size,
            "off_median_s": round(off_s, 5),
            "on_median_s": round(on_s, 5),
            "off_elements_per_s": round(args.size / off_s),
            "on_elements_per_s": round(args.size / on_s),
            "cost": round(on_s / off_s - 1, 4),
            "target": TARGETS[name],
            "ok": ok,
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
