"""Dataset pipeline throughput through the public `grain` API, as JSON lines.

Usage: python benchmarks/pipeline.py [--repeats 5] [--size 200000] [--cases a,b]
       [--case-size filter_batch_tdefault=50000]

Runs unchanged against this workspace's `grain` and against upstream grain==0.2.18
(benchmarks/compare.py runs it under both). It touches nothing but `import grain`
then `grain.MapDataset` and `grain.ReadOptions`.

Each line is one case: the median of `repeats` timed runs after one untimed warm-up.
Every run builds its pipeline afresh (so no run can reuse another's work), keeps what
it produced, and is checked once the clock has stopped: the output must be exactly
the expected values as a multiset (sorted, it equals a closed-form arange), shuffled
(not in source order), in batches of 32 where batched, and in the same order in every
run. The warm-up also counts calls: `map` and `filter` must call the user function once
per element they see. `ok` is false, and `failed_checks` says why, if any check failed.
`elements` counts source positions (N), so filter cases report the rate at which the
source is consumed; `output_elements` is what came out. `digest` fingerprints the
output order, so two implementations can be seen to agree (or not) on the shuffle.

Upstream refuses `MapDataset.batch` after `MapDataset.filter`, so the filter cases
batch after `to_iter_dataset`: filter -> map -> to_iter_dataset -> batch(32).
Stdout carries only the JSON lines; everything else printed goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from _bench_common import (
    checked_cases,
    grain_version,
    implementation,
    json_stdout,
    parse_case_sizes,
)

import grain

BATCH_SIZE = 32


def _add_one(x: Any) -> Any:
    return x + 1


def _is_even(x: Any) -> bool:
    return x % 2 == 0


@dataclass(frozen=True)
class Functions:
    """The user functions a pipeline calls: plain ones when timed, counting ones in warm-up."""

    add_one: Callable[[Any], Any] = _add_one
    is_even: Callable[[Any], bool] = _is_even


PLAIN = Functions()


def _counting() -> tuple[Functions, list[None], list[None]]:
    """Functions that record each call (list.append is atomic, so threads may call them)."""
    map_calls: list[None] = []
    filter_calls: list[None] = []

    def add_one(x: Any) -> Any:
        map_calls.append(None)
        return x + 1

    def is_even(x: Any) -> bool:
        filter_calls.append(None)
        return x % 2 == 0

    return Functions(add_one, is_even), map_calls, filter_calls


def _options(threads: str) -> Any:
    # ReadOptions() is passed explicitly so "default" means each implementation's default.
    return grain.ReadOptions(num_threads=0) if threads == "0" else grain.ReadOptions()


def _map_batch(n: int, threads: str, fns: Functions) -> list[Any]:
    ds = (
        grain.MapDataset.range(n)
        .seed(0)
        .shuffle()
        .map(fns.add_one)
        .batch(BATCH_SIZE)
        .to_iter_dataset(_options(threads))
    )
    return list(ds)


def _filter_batch(n: int, threads: str, fns: Functions) -> list[Any]:
    ds = (
        grain.MapDataset.range(n)
        .seed(0)
        .shuffle()
        .filter(fns.is_even)
        .map(fns.add_one)
        .to_iter_dataset(_options(threads))
        .batch(BATCH_SIZE)
    )
    return list(ds)


def _random_access(n: int, threads: str, fns: Functions) -> list[Any]:
    del threads
    ds = grain.MapDataset.range(n).seed(0).shuffle().map(fns.add_one)
    return [ds[i] for i in range(len(ds))]


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[int, str, Functions], list[Any]]
    threads: str | None  # "0", "default", or None where no threads are involved
    batched: bool
    filtered: bool


CASES = {
    case.name: case
    for case in (
        Case("map_batch_t0", _map_batch, "0", batched=True, filtered=False),
        Case("map_batch_tdefault", _map_batch, "default", batched=True, filtered=False),
        Case("filter_batch_t0", _filter_batch, "0", batched=True, filtered=True),
        Case("filter_batch_tdefault", _filter_batch, "default", batched=True, filtered=True),
        Case("random_access", _random_access, None, batched=False, filtered=False),
    )
}


def _expected(n: int, filtered: bool) -> np.ndarray:
    # x + 1 over range(n) is 1..n; keeping the even x leaves the odd values 1, 3, ...
    return np.arange(1, n + 1, 2 if filtered else 1, dtype=np.int64)


def _flatten(case: Case, produced: list[Any]) -> tuple[np.ndarray, list[str]]:
    """The produced values as one int64 array, and any failed shape checks."""
    failed = []
    if not case.batched:
        return np.asarray(produced, dtype=np.int64).reshape(-1), failed
    arrays = [np.asarray(batch, dtype=np.int64) for batch in produced]
    sizes = [a.shape[0] if a.ndim == 1 else -1 for a in arrays]
    last_ok = not sizes or 0 < sizes[-1] <= BATCH_SIZE
    if not last_ok or any(size != BATCH_SIZE for size in sizes[:-1]):
        failed.append("batch_sizes")
    if not arrays:
        return np.zeros(0, dtype=np.int64), failed
    return np.concatenate([a.reshape(-1) for a in arrays]), failed


def _check(case: Case, n: int, values: np.ndarray, reference: np.ndarray | None) -> list[str]:
    expected = _expected(n, case.filtered)
    failed = []
    if values.shape != expected.shape:
        failed.append("count")
    elif not np.array_equal(np.sort(values), expected):
        failed.append("values")
    elif n > 2 and np.array_equal(values, expected):
        failed.append("shuffled")
    if reference is not None and not np.array_equal(values, reference):
        failed.append("deterministic")
    return failed


def _digest(values: np.ndarray) -> str:
    return hashlib.sha256(values.astype("<i8").tobytes()).hexdigest()[:16]


def measure(case: Case, n: int, repeats: int) -> dict:
    failed: list[str] = []
    # The warm-up also counts calls: each user function runs once per element it must see.
    fns, map_calls, filter_calls = _counting()
    warm, shape_failed = _flatten(case, case.run(n, case.threads or "0", fns))
    failed += shape_failed + _check(case, n, warm, None)
    if len(map_calls) != warm.shape[0]:
        failed.append("map_calls")
    if len(filter_calls) != (n if case.filtered else 0):
        failed.append("filter_calls")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        produced = case.run(n, case.threads or "0", PLAIN)
        times.append(time.perf_counter() - start)
        values, shape_failed = _flatten(case, produced)
        failed += shape_failed + _check(case, n, values, warm)
    median = statistics.median(times)
    fields: dict[str, Any] = {"benchmark": "pipeline", "case": case.name}
    if case.threads is not None:
        fields["threads"] = 0 if case.threads == "0" else _options("default").num_threads
    fields |= {
        "elements": n,
        "output_elements": int(warm.shape[0]),
        "median_s": round(median, 6),
        "elements_per_s": round(n / median),
        "repeats": repeats,
        "ok": not failed,
    }
    if failed:
        fields["failed_checks"] = sorted(set(failed))
    fields["digest"] = _digest(warm)
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    parser.add_argument(
        "--case-size", default="", help="per-case sizes overriding --size: CASE=N[,CASE=N]"
    )
    args = parser.parse_args()
    names = checked_cases(parser, args, CASES)
    sizes = parse_case_sizes(args.case_size, CASES)
    out = json_stdout()
    machine = {
        "implementation": implementation(),
        "grain_version": grain_version(),
        "grain_file": grain.__file__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    for name in names:
        line = measure(CASES[name], sizes.get(name, args.size), args.repeats)
        out.write(json.dumps({**line, **machine}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
