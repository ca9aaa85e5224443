"""Index shuffle throughput against numpy's permutation, as JSON lines.

Usage: uv run python benchmarks/index_shuffle.py [--repeats 7] [--size 1000000]

Each line is one measurement: the median of `repeats` runs, interleaved with
the reference (numpy.random.default_rng(0).permutation(size)) so both see the
same machine load, and the ratio of the two rates. `peak_bytes` is the largest
traced allocation during one run: it grows with the number of indices asked
for, never with the domain size n (the shuffle needs O(1) memory in n).
Targets from issue 2: vectorized >= 0.5x the reference; scalar >= 500 k calls/s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from grain_index import (
    DEFAULT_ROUNDS,
    IndexSampler,
    MixingSchedule,
    NoSharding,
    index_shuffle,
    index_shuffle_array,
    index_unshuffle_array,
)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(
    name: str,
    count: int,
    unit: str,
    fn: Callable[[], object],
    reference: Callable[[], object],
    reference_count: int,
    repeats: int,
    **fields: object,
) -> dict:
    fn()
    reference()
    times, reference_times = [], []
    for _ in range(repeats):
        times.append(_time(fn))
        reference_times.append(_time(reference))
    median = statistics.median(times)
    reference_median = statistics.median(reference_times)
    rate = count / median
    reference_rate = reference_count / reference_median
    return {
        "benchmark": "index_shuffle",
        "case": name,
        **fields,
        "count": count,
        "repeats": repeats,
        "median_s": round(median, 6),
        "rate": round(rate),
        "unit": unit,
        "reference": "numpy.random.default_rng(0).permutation",
        "reference_rate": round(reference_rate),
        "ratio": round(rate / reference_rate, 3),
        "peak_bytes": _peak_bytes(fn),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--scalar-calls", type=int, default=200_000)
    args = parser.parse_args()
    size = args.size

    def reference() -> object:
        return np.random.default_rng(0).permutation(size)

    indices = np.arange(size, dtype=np.int64)
    cases = []
    for n in (size, 10**12):
        cases.append(
            measure(
                "vectorized",
                size,
                "indices/s",
                lambda n=n: index_shuffle_array(indices, n - 1, 1234, DEFAULT_ROUNDS),
                reference,
                size,
                args.repeats,
                n=n,
                rounds=DEFAULT_ROUNDS,
            )
        )
    cases.append(
        measure(
            "vectorized_inverse",
            size,
            "indices/s",
            lambda: index_unshuffle_array(indices, 10**12 - 1, 1234, DEFAULT_ROUNDS),
            reference,
            size,
            args.repeats,
            n=10**12,
            rounds=DEFAULT_ROUNDS,
        )
    )
    calls = args.scalar_calls
    for rounds in (4, DEFAULT_ROUNDS):
        cases.append(
            measure(
                "scalar",
                calls,
                "calls/s",
                lambda rounds=rounds: [
                    index_shuffle(i, size - 1, 1234, rounds) for i in range(calls)
                ],
                reference,
                size,
                args.repeats,
                n=size,
                rounds=rounds,
            )
        )
    sampler = IndexSampler(size, NoSharding(), shuffle=True, num_epochs=3, seed=1234)
    steps = np.arange(size, 2 * size)
    cases.append(
        measure(
            "index_sampler_record_keys",
            size,
            "keys/s",
            lambda: sampler.record_keys(steps),
            reference,
            size,
            args.repeats,
            n=size,
        )
    )
    schedule = MixingSchedule([0.5, 0.3, 0.2])
    cases.append(
        measure(
            "mixing_lookup",
            size,
            "positions/s",
            lambda: schedule.lookup_array(indices),
            reference,
            size,
            args.repeats,
            weights=[0.5, 0.3, 0.2],
        )
    )
    machine = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    for case in cases:
        print(json.dumps({**case, **machine}))


if __name__ == "__main__":
    main()
