"""Reading ArrayRecord files through `grain.sources.ArrayRecordDataSource`, as JSON lines.

Usage: python benchmarks/source_read.py [--repeats 5] [--size 20000] [--cases a,b]
       [--case-size CASE=N]

Runs unchanged against this workspace's `grain` and against upstream grain==0.2.18
(`benchmarks/compare.py --bench source_read` runs it under both): it writes the files
with array_record's own `ArrayRecordWriter` (`group_size:1`) and reads them through
`import grain` only.

Each case reads N records of 1 KB from 4 shards (each record starts with its index
as 8 little-endian bytes, the rest is random):

  getitem_shuffled      ``src[i]`` for every i of a fixed random permutation
  pipeline_t0           MapDataset.source(src).shuffle(seed=0).to_iter_dataset(
                        ReadOptions(num_threads=0))
  pipeline_tdefault     the same with ReadOptions() (each implementation's default)
  user_batch_t0         the same records, in memory, held by a user's plain Python
                        source (``__len__``, ``__getitem__`` over a list): MapDataset.source(
                        src).shuffle(seed=0).batch(32).to_iter_dataset(ReadOptions(
                        num_threads=0)), read one record at a time
  user_getitems_batch_t0
                        the same with a correct ``__getitems__`` that the source does
                        not declare (no ``batched_reads = True``): Grain reads it one
                        record at a time, and so does this workspace since it
                        requires the declaration

A line is the median of `repeats` timed runs after one untimed warm-up (wall time,
and `median_cpu_s`, the process's CPU time); every run's
output is checked (N records whose indices form a permutation of 0..N-1, and for
getitem exactly the permutation asked for); `ok` says whether all checks passed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _bench_common import implementation, parse_case_sizes
from array_record.python.array_record_module import ArrayRecordWriter

import grain

RECORD_BYTES = 1024
SHARDS = 4
CASES = (
    "getitem_shuffled",
    "pipeline_t0",
    "pipeline_tdefault",
    "user_batch_t0",
    "user_getitems_batch_t0",
)


class _UserSource:
    """What a user writes by hand: a list of records behind `__len__` and `__getitem__`."""

    def __init__(self, records: list[bytes]):
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> bytes:
        return self._records[index]


class _UserSourceWithGetitems(_UserSource):
    """The same with a correct `__getitems__`, not declared with `batched_reads = True`."""

    def __getitems__(self, indices: Sequence[int]) -> list[bytes]:
        records = self._records
        return [records[i] for i in indices]


def _body(n: int) -> np.ndarray:
    """The n records as rows of bytes: each starts with its index, the rest is random."""
    rng = np.random.default_rng(0)
    body = rng.integers(0, 256, (n, RECORD_BYTES), dtype=np.uint8)
    body[:, :8] = np.arange(n, dtype="<u8").view(np.uint8).reshape(n, 8)
    return body


def write_files(directory: str, n: int) -> list[str]:
    body = _body(n)
    paths = []
    for shard, rows in enumerate(np.array_split(body, SHARDS)):
        path = os.path.join(directory, f"data-{shard:05d}-of-{SHARDS:05d}")
        writer = ArrayRecordWriter(path, "group_size:1")
        for row in rows:
            writer.write(row.tobytes())
        writer.close()
        paths.append(path)
    return paths


def _indices(records: Sequence[bytes]) -> np.ndarray:
    return np.array([int.from_bytes(r[:8], "little") for r in records], dtype=np.int64)


def _case(name: str, paths: list[str], n: int) -> tuple[Callable[[], list[bytes]], Any]:
    if name.startswith("user_"):  # in memory: no files
        records = [row.tobytes() for row in _body(n)]
        kind = _UserSourceWithGetitems if name == "user_getitems_batch_t0" else _UserSource
        batches = grain.MapDataset.source(kind(records)).shuffle(seed=0).batch(32, batch_fn=list)
        t0 = grain.ReadOptions(num_threads=0)
        return (lambda: [r for b in batches.to_iter_dataset(t0) for r in b]), None
    source = grain.sources.ArrayRecordDataSource(paths)
    if name == "getitem_shuffled":
        order = np.random.default_rng(1).permutation(n).tolist()
        return (lambda: [source[i] for i in order]), np.array(order)
    options = grain.ReadOptions(num_threads=0) if name == "pipeline_t0" else grain.ReadOptions()
    ds = grain.MapDataset.source(source).shuffle(seed=0)
    return (lambda: list(ds.to_iter_dataset(options))), None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--case-size", default="", help="CASE=N[,CASE=N]")
    args = parser.parse_args(argv)
    sizes = parse_case_sizes(args.case_size, CASES)
    with tempfile.TemporaryDirectory() as directory:
        written: dict[int, list[str]] = {}
        for name in args.cases.split(","):
            n = int(sizes.get(name, args.size))
            if n not in written and not name.startswith("user_"):
                os.makedirs(os.path.join(directory, str(n)))
                written[n] = write_files(os.path.join(directory, str(n)), n)
            run, expected = _case(name, written.get(n, []), n)
            out = run()  # warm-up
            digest = hashlib.sha256(_indices(out).tobytes()).hexdigest()[:16]
            times, cpu_times, ok = [], [], True
            for _ in range(args.repeats):
                cpu, start = time.process_time(), time.perf_counter()
                out = run()
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - cpu)
                got = _indices(out)
                ok = ok and len(got) == n and np.array_equal(np.sort(got), np.arange(n))
                if expected is not None:
                    ok = ok and np.array_equal(got, expected)
            median = statistics.median(times)
            line = {
                "benchmark": "source_read",
                "case": name,
                "implementation": implementation(),
                "elements": n,
                "median_s": round(median, 6),
                "elements_per_s": round(n / median),
                # CPU time of the process (all its threads): steadier than wall time on a
                # busy machine, where a run waits for a core.
                "median_cpu_s": round(statistics.median(cpu_times), 6),
                "ok": bool(ok),
                "digest": digest,
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
