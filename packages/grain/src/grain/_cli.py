"""The `grain` command-line tool.

`grain demo` runs what the library can do so far on built-in data and prints
throughput; it grows with each layer. Exit codes: 0 success, 1 a check in the
demo failed, 2 bad usage (argparse).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

import grain
from grain_index import MixingSchedule, derive_seed, index_shuffle_array

T = TypeVar("T")


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds / 1e6:8.1f} M/s"


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


def _demo(args: argparse.Namespace) -> int:
    n, seed, shards = args.num_records, args.seed, 2
    print(f"grain demo: index math on {n:,} built-in records, seed {seed}")
    print("(sources, datasets, worker processes and devices arrive with the next layers)\n")

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
        f"global shuffle, {shards} shards x 2 epochs:  {total:,} record keys  "
        f"{_rate(total, elapsed)}"
    )
    epoch = len(steps) // 2
    first_epoch = np.concatenate([k[:epoch] for k in keys])
    ok = len(np.unique(first_epoch)) == len(first_epoch)
    print(f"  epoch 0 shards are disjoint: {ok}")

    schedule = MixingSchedule([0.7, 0.3])
    lengths = [n, n // 2]
    positions = np.arange(schedule.epoch_length(lengths))
    (components, _), elapsed = _timed(lambda: schedule.lookup_epochs_array(positions, lengths))
    share = float(np.mean(components == 0))
    print(
        f"mix two sources 0.7/0.3: {len(positions):,} positions  {_rate(len(positions), elapsed)}"
        f"  (share of source 0: {share:.4f})"
    )
    ok &= abs(share - 0.7) < 1e-3

    # A checkpoint is one integer: the next step. Restoring it into a fresh
    # sampler must continue with exactly the same records.
    checkpoint_step = len(steps) // 3
    consumed = []
    for i, metadata in enumerate(samplers[0]):
        consumed.append(metadata.record_key)
        _progress(i + 1, checkpoint_step, "reading")
        if i + 1 == checkpoint_step:
            break
    state = {"next_step": checkpoint_step}
    restored = grain.samplers.IndexSampler(
        num_records=n,
        shard_options=grain.sharding.ShardOptions(0, shards, drop_remainder=True),
        shuffle=True,
        num_epochs=2,
        seed=seed,
    )
    continuation = [
        restored[k].record_key for k in range(state["next_step"], state["next_step"] + 1000)
    ]
    same = continuation == keys[0][checkpoint_step : checkpoint_step + 1000].tolist()
    print(f"checkpoint {state} -> restored continuation identical: {same}")
    ok &= same and consumed == keys[0][:checkpoint_step].tolist()

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
        default=200_000,
        help="records in the built-in source (default: 200000)",
    )
    demo.add_argument("--seed", type=int, default=42, help="pipeline seed (default: 42)")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    if getattr(args, "num_records", 1) < 2:
        parser.error("--num-records must be >= 2")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
