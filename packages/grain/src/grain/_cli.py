"""The `grain` command-line tool.

`grain demo` runs what the library can do so far on built-in data and prints
throughput; it grows with each layer. Exit codes: 0 success, 1 a check in the
demo failed, 2 bad usage (argparse).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

import grain
from grain_index import derive_seed, index_shuffle_array
from grain_sources import write_array_record

T = TypeVar("T")


def _rate(count: int, seconds: float) -> str:
    rate = count / seconds
    return f"{rate / 1e6:8.1f} M/s" if rate >= 1e6 else f"{rate / 1e3:8.1f} k/s"


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Runs `fn` twice and times the second, warm run (the first builds tables)."""
    fn()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _progress(done: int, total: int, label: str) -> None:
    if sys.stderr.isatty():
        width = 30
        filled = width * done // total
        print(
            f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}",
            end="" if done < total else "\n",
            file=sys.stderr,
            flush=True,
        )


def _encode_records(start: int, stop: int) -> np.ndarray:
    """Built-in "documents" as rows of int32: 64 token ids, then a label."""
    index = np.arange(start, stop, dtype=np.int32)[:, None]
    tokens = (np.arange(64, dtype=np.int32) * 31 + index) % 1000
    return np.concatenate([tokens, index % 10], axis=1)


def _write_sources(directory: str, n: int) -> tuple[str, str]:
    """Writes the built-in data as sharded ArrayRecord files; returns their patterns."""
    patterns = []
    for name, start, stop, shards in (("books", 0, n, 4), ("web", n, n + n // 2, 2)):
        rows = _encode_records(start, stop)
        base = os.path.join(directory, name)
        begin = time.perf_counter()
        write_array_record([row.tobytes() for row in rows], base, num_shards=shards)
        elapsed = time.perf_counter() - begin
        print(
            f"wrote {len(rows):,} records into {shards} ArrayRecord shards ({name}): "
            f"{_rate(len(rows), elapsed)}"
        )
        patterns.append(f"{base}@{shards}")
    return patterns[0], patterns[1]


def _decode(record: bytes) -> dict[str, np.ndarray]:
    row = np.frombuffer(record, dtype=np.int32)
    return {"tokens": row[:64], "label": row[64]}


def _augment(record: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {**record, "noise": rng.standard_normal(4).astype(np.float32)}


def _pipeline(
    sources: tuple[str, str], n: int, seed: int, threads: int, workers: int = 0
) -> grain.IterDataset:
    """Two shuffled file sources mixed 0.7/0.3, a random augmentation, batches of 32."""
    books_files, web_files = sources
    books = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(books_files))
    web = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(web_files))
    books = books.seed(seed).shuffle().map(_decode)
    web = web.seed(seed + 1).shuffle().map(_decode)
    mixed = grain.MapDataset.mix([books.repeat(), web.repeat()], weights=[0.7, 0.3])
    ds = (
        mixed.seed(seed)
        .random_map(_augment)
        .batch(32, drop_remainder=True)[: n // 32]
        .to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=64))
    )
    if workers:
        options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=8)
        ds = ds.mp_prefetch(options)
    return ds


def _same_batches(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


def _dataset_demo(sources: tuple[str, str], n: int, seed: int) -> bool:
    ok = True
    for threads, workers in ((0, 0), (4, 0), (0, 2)):
        ds = _pipeline(sources, n, seed, threads, workers)
        count = 0
        start = time.perf_counter()
        with iter(ds) as iterator:
            for batch in iterator:
                count += len(batch["label"])
                _progress(count // 32, n // 32, f"threads={threads} workers={workers}")
        elapsed = time.perf_counter() - start
        print(
            f"mix 0.7/0.3 -> random_map -> batch 32, {threads:2d} threads, {workers} worker "
            f"processes: {count:,} records  {_rate(count, elapsed)}"
        )

    # Checkpoint mid-epoch with 2 worker processes, as JSON, and restore it.
    ds = _pipeline(sources, n, seed, 0, workers=2)
    iterator = iter(ds)
    consumed = n // 32 // 3
    for _ in range(consumed):
        next(iterator)
    checkpoint = json.dumps(iterator.get_state())
    expected = [next(iterator) for _ in range(20)]
    iterator.close()
    with iter(ds) as restored:
        restored.set_state(json.loads(checkpoint))
        continuation = [next(restored) for _ in range(20)]
    same = _same_batches(expected, continuation)
    print(f"checkpoint after {consumed} batches: {checkpoint}")
    print(f"  restored into fresh worker processes, next 20 batches identical: {same}")
    ok &= same

    labels = np.concatenate([b["label"] for b in _pipeline(sources, n, seed, 0)])
    print(
        f"  one epoch holds {len(labels):,} records; the same with threads and 2 workers: ",
        end="",
    )
    again = np.concatenate([b["label"] for b in _pipeline(sources, n, seed, 4, workers=2)])
    same = bool(np.array_equal(labels, again))
    print(same)
    return ok and same


def _demo(args: argparse.Namespace) -> int:
    n, seed, shards = args.num_records, args.seed, 2
    print(f"grain demo: {n:,} built-in records, seed {seed}")
    print("(devices arrive with the next layer)\n")
    with tempfile.TemporaryDirectory(prefix="grain-demo-") as directory:
        sources = _write_sources(directory, n)
        ok = _dataset_demo(sources, n, seed)
    print()

    samplers = [
        grain.samplers.IndexSampler(
            num_records=n,
            shard_options=grain.sharding.ShardOptions(i, shards, drop_remainder=True),
            shuffle=True,
            num_epochs=2,
            seed=seed,
        )
        for i in range(shards)
    ]
    steps = np.arange(len(samplers[0]))
    keys, elapsed = _timed(lambda: [s.record_keys(steps) for s in samplers])
    total = shards * len(steps)
    print(
        f"sampler: global shuffle, {shards} shards x 2 epochs: {total:,} record keys  "
        f"{_rate(total, elapsed)}"
    )
    epoch = len(steps) // 2
    first_epoch = np.concatenate([k[:epoch] for k in keys])
    disjoint = len(np.unique(first_epoch)) == len(first_epoch)
    print(f"  epoch 0 shards are disjoint: {disjoint}")
    ok &= disjoint

    big = index_shuffle_array(
        np.arange(1_000_000), max_index=10**12 - 1, seed=derive_seed(seed, "demo")
    )
    print(f"shuffle of a 10^12-record index space: first keys {big[:3].tolist()} (no O(n) memory)")
    print("\nall checks passed" if ok else "\nA CHECK FAILED")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `grain` command."""
    parser = argparse.ArgumentParser(prog="grain", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the built-in demo pipeline and print throughput")
    demo.add_argument(
        "--num-records",
        type=int,
        default=100_000,
        help="records in the built-in source (default: 100000)",
    )
    demo.add_argument("--seed", type=int, default=42, help="pipeline seed (default: 42)")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    if getattr(args, "num_records", 320) < 320:
        parser.error("--num-records must be >= 320 (ten batches of 32)")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
