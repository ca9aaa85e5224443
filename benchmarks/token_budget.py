"""Batches by token budget against fixed-size batches and first-fit packing, as JSON lines.

Usage: uv run python benchmarks/token_budget.py [--repeats 5] [--size 20000]
       [--budget 16384] [--max-length 2048] [--cases a,b]

Data: N documents (`--size`) of int32 tokens with lognormal lengths (log-mean 5.5,
log-sd 1.0: median ~245 tokens, a long tail), clipped to 1..`--max-length`, seed 0,
read by ``MapDataset.source(docs).to_iter_dataset(ReadOptions(num_threads=0))``.
Token j of document i is ``i * max_length + j + 1``. Every case spends the same
token budget per batch (`--budget`, 16 384: 8 rows of 2 048):

  fixed_pad_max        batch(8) padded to max_length: one shape, the usual fixed batch
  fixed_pad_bucketed   batch(8) padded to the batch's longest document rounded up to a
                       padded length (powers of two from 64): up to 6 shapes
  first_fit_pack       FirstFitPackIterDataset({"tokens": max_length}, 8 bins), batch(8):
                       one shape, documents share rows (segment ids keep them apart)
  token_budget         TokenBudgetBatchIterDataset(budget, padded lengths as above) in
                       stream order
  token_budget_bucketed   the same with bucket_window=1024
  token_budget_full_rows  bucketed, full_rows=True: one shape per padded length
  token_budget_fine    bucketed, full_rows=True, padded lengths in steps of 1.5x / 1.33x
                       (64, 96, 128, 192, ..., 1536, 2048): 11 shapes, less padding

Per case: `tokens_per_s` (document tokens, not padding, per second, median of
`repeats` runs interleaved round-robin over the cases after one untimed warm-up),
`padding_fraction` (padding slots / all slots of the emitted arrays),
`distinct_shapes` (the jit compilations a step would need), `batches`, the median
and largest time per batch in ms (latency), and for the stateful stages the state's
JSON size and the median time of `set_state` at 20 positions spread over the run
(a restore replays at most one batch or one window). `ratio` is tokens_per_s over
fixed_pad_max's in the same run. Every run is checked after the clock stops: every
document token exactly once, padding 0, each batch within the budget; `ok` is false
and `failed_checks` says why otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from _bench_common import implementation, json_stdout

import grain

ROWS = 8


def make_documents(n: int, max_length: int) -> tuple[list[np.ndarray], int]:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(5.5, 1.0, size=n).astype(np.int64), 1, max_length)
    docs = [
        np.arange(i * max_length + 1, i * max_length + 1 + int(k), dtype=np.int32)
        for i, k in enumerate(lengths.tolist())
    ]
    return docs, int(lengths.sum())


def padded_lengths(max_length: int) -> list[int]:
    return [1 << k for k in range(6, max_length.bit_length()) if 1 << k <= max_length]


def _pad_to(length: int) -> Callable[[list[np.ndarray]], np.ndarray]:
    def pad(docs: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((ROWS, length), dtype=np.int32)
        for row, doc in enumerate(docs):
            out[row, : len(doc)] = doc
        return out

    return pad


def _pad_bucketed(lengths: list[int]) -> Callable[[list[np.ndarray]], np.ndarray]:
    def pad(docs: list[np.ndarray]) -> np.ndarray:
        longest = max(len(doc) for doc in docs)
        length = next(value for value in lengths if value >= longest)
        return _pad_to(length)(docs)

    return pad


def build(case: str, docs: list[np.ndarray], budget: int, max_length: int) -> Any:
    ds = grain.MapDataset.source(docs).to_iter_dataset(grain.ReadOptions(num_threads=0))
    lengths = padded_lengths(max_length)
    if case == "fixed_pad_max":
        return ds.batch(ROWS, batch_fn=_pad_to(max_length))
    if case == "fixed_pad_bucketed":
        return ds.batch(ROWS, batch_fn=_pad_bucketed(lengths))
    if case == "first_fit_pack":
        packed = grain.experimental.FirstFitPackIterDataset(
            ds.map(lambda doc: {"tokens": doc}),
            length_struct={"tokens": max_length},
            num_packing_bins=ROWS,
            shuffle_bins=False,
        )
        return packed.batch(ROWS)
    window = None if case == "token_budget" else 1024
    if case == "token_budget_fine":
        lengths = sorted({*lengths, *(length * 3 // 2 for length in lengths[:-1])})
    return grain.experimental.TokenBudgetBatchIterDataset(
        ds,
        token_budget=budget,
        padded_lengths=lengths,
        bucket_window=window,
        full_rows=case in ("token_budget_full_rows", "token_budget_fine"),
    )


CASES = (
    "fixed_pad_max",
    "fixed_pad_bucketed",
    "first_fit_pack",
    "token_budget",
    "token_budget_bucketed",
    "token_budget_full_rows",
    "token_budget_fine",
)


def tokens_of(case: str, batch: Any) -> np.ndarray:
    """The batch's token array [rows, length]."""
    if case == "first_fit_pack":
        return batch["tokens"]
    if case.startswith("token_budget"):
        return batch[0]
    return batch


def timed(iterator: Iterator[Any]) -> tuple[list[Any], list[float]]:
    batches, times = [], []
    clock = time.perf_counter
    while True:
        start = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            return batches, times
        times.append(clock() - start)
        batches.append(batch)


def check(
    case: str, batches: list[Any], total: int, budget: int, expected: np.ndarray
) -> tuple[list[str], float, int]:
    """Failed checks, the padding fraction and the distinct shapes."""
    failed = []
    arrays = [tokens_of(case, batch) for batch in batches]
    slots = sum(array.size for array in arrays)
    real = np.concatenate([array[array > 0] for array in arrays])
    if real.size != total or not np.array_equal(np.sort(real), expected):
        failed.append("tokens_once")
    if any(array.size > budget for array in arrays):
        failed.append("budget")
    shapes = {array.shape for array in arrays}
    return failed, 1 - total / slots, len(shapes)


def restore_ms(ds: Any, states: list[Any]) -> float:
    """Median ms of set_state on a fresh iterator, over the given states."""
    times = []
    for state in states:
        iterator = iter(ds)
        start = time.perf_counter()
        iterator.set_state(state)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=20_000, help="number of documents")
    parser.add_argument("--budget", type=int, default=16_384)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    names = [name for name in args.cases.split(",") if name]
    unknown = [name for name in names if name not in CASES]
    if unknown or args.repeats < 1 or args.size < 1:
        parser.error(f"--cases from {list(CASES)}; --repeats and --size positive")
    if args.budget < ROWS * args.max_length:
        parser.error("--budget must hold 8 rows of --max-length (the fixed batches' shape)")
    out = json_stdout()
    docs, total = make_documents(args.size, args.max_length)
    expected = np.sort(np.concatenate(docs))
    times: dict[str, list[float]] = {name: [] for name in names}
    per_batch: dict[str, list[float]] = {name: [] for name in names}
    results: dict[str, dict[str, Any]] = {}
    failed: dict[str, list[str]] = {name: [] for name in names}
    for name in names:  # the untimed warm-up, checked in full
        ds = build(name, docs, args.budget, args.max_length)
        batches, _ = timed(iter(ds))
        more, padding, shapes = check(name, batches, total, args.budget, expected)
        failed[name] += more
        results[name] = {"padding_fraction": padding, "shapes": shapes, "batches": len(batches)}
        if name.startswith("token_budget"):
            iterator = iter(ds)
            states = [iterator.get_state()]
            for _ in iterator:
                states.append(iterator.get_state())
            picks = [states[k] for k in np.linspace(0, len(states) - 1, 20).astype(int)]
            results[name]["state_bytes"] = max(len(json.dumps(s)) for s in states)
            results[name]["restore_ms"] = restore_ms(ds, picks)
        del batches
    for _ in range(args.repeats):  # interleaved: every case sees the same load
        for name in names:
            ds = build(name, docs, args.budget, args.max_length)
            start = time.perf_counter()
            batches, batch_times = timed(iter(ds))
            times[name].append(time.perf_counter() - start)
            per_batch[name] += batch_times
            if len(batches) != results[name]["batches"]:
                failed[name].append("deterministic")
            del batches
    machine = {
        "implementation": implementation(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
    }
    reference = total / statistics.median(times["fixed_pad_max"]) if "fixed_pad_max" in times else 0
    for name in names:
        median = statistics.median(times[name])
        rate = total / median
        result = results[name]
        line: dict[str, Any] = {
            "benchmark": "token_budget",
            "case": name,
            "elements": total,
            "documents": args.size,
            "median_s": round(median, 6),
            "tokens_per_s": round(rate),
            "ratio": round(rate / reference, 3) if reference else None,
            "padding_fraction": round(result["padding_fraction"], 4),
            "distinct_shapes": result["shapes"],
            "batches": result["batches"],
            "batch_ms_median": round(statistics.median(per_batch[name]) * 1e3, 4),
            "batch_ms_max": round(max(per_batch[name]) * 1e3, 3),
            "budget": args.budget,
            "repeats": args.repeats,
            "ok": not failed[name],
        }
        if "state_bytes" in result:
            line["state_bytes"] = result["state_bytes"]
            line["restore_ms_median"] = round(result["restore_ms"], 3)
        if failed[name]:
            line["failed_checks"] = sorted(set(failed[name]))
        out.write(json.dumps({**line, **machine}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
