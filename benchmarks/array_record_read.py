"""ArrayRecord read throughput: raw reader, source, and pipelines, as JSON lines.

Usage: python benchmarks/array_record_read.py [--records 100000] [--record-bytes 1024]
       [--shards 4] [--repeats 5] [--dir DIR]

Writes `records` random records of `record-bytes` into `shards` ArrayRecord files
with `grain_sources.write_array_record` (each record starts with its index as 8
little-endian bytes), then times, in one run and on the same files:

  raw_*         ArrayRecordReader `seek(i); read()` per record, readers opened
                beforehand (the reference the source is held against);
  source_*      ArrayRecordDataSource: `src[i]` per record, and `__getitems__`
                in batches of 1024;
  pipeline_*    MapDataset.source(src) [.shuffle(seed=0)] .to_iter_dataset(
                ReadOptions(num_threads=T)) for T in 0 and 16, over the files
                (`ar`) and over an in-memory list of the same records (`mem`).

Each case is read `sequential`ly (index order) and `shuffled` (the same global
permutation for raw and source cases; `MapDataset.shuffle(seed=0)` for
pipelines). Each line is one case: the median of `repeats` timed runs after one
untimed warm-up; every run's output is checked (record count, and the index in
every record's first 8 bytes), `ok` says whether it passed. The last lines are
ratios: source batched / raw reader and pipeline ar / mem (with their targets), the
raw reader / in-memory pipeline (the ceiling of ar / mem: what a source costing
nothing beyond the reader would reach), and pipeline ar / raw reader.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

import grain
import grain_sources

# The options ArrayRecordDataSource reads with when given none (no read-ahead, no
# reader thread pool), so that the raw reads below compare like with like.
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


def _records(count: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    body = rng.integers(0, 256, (count, size), dtype=np.uint8)
    body[:, :8] = np.arange(count, dtype="<u8").view(np.uint8).reshape(count, 8)
    return [row.tobytes() for row in body]


def _indices_of(records: Sequence[bytes]) -> np.ndarray:
    return np.array([int.from_bytes(r[:8], "little") for r in records], dtype=np.int64)


def _time(run: Callable[[], list[bytes]], expected: np.ndarray, repeats: int) -> dict[str, Any]:
    run()
    times, ok = [], True
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
        ok = ok and len(out) == len(expected) and np.array_equal(_indices_of(out), expected)
    return {"seconds": statistics.median(times), "ok": bool(ok)}


def _raw(paths: Sequence[str], order: np.ndarray, ends: np.ndarray) -> Callable[[], list[bytes]]:
    readers = [ArrayRecordReader(p, READER_OPTIONS) for p in paths]
    files = np.searchsorted(ends, order, side="right")
    local = order - (ends - np.diff(ends, prepend=0))[files]
    plan = list(zip(files.tolist(), local.tolist(), strict=True))

    def run() -> list[bytes]:
        out = []
        for file, record in plan:
            reader = readers[file]
            reader.seek(record)
            out.append(reader.read())
        return out

    return run


def _source_single(src: Any, order: np.ndarray) -> Callable[[], list[bytes]]:
    wanted = order.tolist()
    return lambda: [src[i] for i in wanted]


def _source_batched(src: Any, order: np.ndarray, batch: int = 1024) -> Callable[[], list[bytes]]:
    chunks = [order[k : k + batch] for k in range(0, len(order), batch)]

    def run() -> list[bytes]:
        out: list[bytes] = []
        for chunk in chunks:
            out.extend(src.__getitems__(chunk))
        return out

    return run


def _pipeline(source: Any, shuffled: bool, threads: int) -> Callable[[], list[bytes]]:
    def run() -> list[bytes]:
        ds = grain.MapDataset.source(source)
        if shuffled:
            ds = ds.shuffle(seed=0)
        return list(ds.to_iter_dataset(grain.ReadOptions(num_threads=threads)))

    return run


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)

    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "numpy": np.__version__}
    records = _records(args.records, args.record_bytes)
    mb = args.records * args.record_bytes / 1e6
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        start = time.perf_counter()
        paths = grain_sources.write_array_record(
            records, os.path.join(tmp, "bench"), num_shards=args.shards, progress=False
        )
        write_s = time.perf_counter() - start
        _emit("write", args.records, mb, {"seconds": write_s, "ok": True}, env)
        src = grain_sources.ArrayRecordDataSource(paths)
        ends = src._ends
        permutation = np.random.default_rng(1).permutation(args.records)
        sequential = np.arange(args.records)
        # The pipelines' shuffled order, to check their output against.
        shuffled_pipeline = _indices_of(
            list(grain.MapDataset.source(records).shuffle(seed=0).to_iter_dataset())
        )
        rates: dict[str, float] = {}
        for order_name, order in (("sequential", sequential), ("shuffled", permutation)):
            cases = {
                f"raw_seek_read_{order_name}": _raw(paths, order, ends),
                f"source_getitem_{order_name}": _source_single(src, order),
                f"source_getitems_{order_name}": _source_batched(src, order),
            }
            for name, run in cases.items():
                result = _time(run, order, args.repeats)
                rates[name] = args.records / result["seconds"]
                _emit(name, args.records, mb, result, env)
            expected = shuffled_pipeline if order_name == "shuffled" else sequential
            for threads in (0, 16):
                for kind, source in (("ar", src), ("mem", records)):
                    name = f"pipeline_{kind}_{order_name}_t{threads}"
                    run = _pipeline(source, order_name == "shuffled", threads)
                    result = _time(run, expected, args.repeats)
                    rates[name] = args.records / result["seconds"]
                    _emit(name, args.records, mb, result, env)
        for order_name in ("sequential", "shuffled"):
            _ratio(
                f"source_batched_vs_raw_{order_name}",
                rates[f"source_getitems_{order_name}"],
                rates[f"raw_seek_read_{order_name}"],
                target=0.5,
            )
            for threads in (0, 16):
                _ratio(
                    f"pipeline_ar_vs_mem_{order_name}_t{threads}",
                    rates[f"pipeline_ar_{order_name}_t{threads}"],
                    rates[f"pipeline_mem_{order_name}_t{threads}"],
                    target=0.8,
                )
            # The ceiling of the ratio above: a source that cost nothing beyond the raw
            # reader would reach this; and how close the whole pipeline comes to the reader.
            _ratio(
                f"raw_reader_vs_mem_pipeline_{order_name}_t0",
                rates[f"raw_seek_read_{order_name}"],
                rates[f"pipeline_mem_{order_name}_t0"],
                target=None,
            )
            _ratio(
                f"pipeline_ar_vs_raw_{order_name}_t0",
                rates[f"pipeline_ar_{order_name}_t0"],
                rates[f"raw_seek_read_{order_name}"],
                target=None,
            )
        src.close()


def _emit(case: str, records: int, mb: float, result: dict[str, Any], env: dict[str, Any]) -> None:
    seconds = result["seconds"]
    line = {
        "case": case,
        "records": records,
        "seconds": round(seconds, 4),
        "records_per_s": round(records / seconds),
        "mb_per_s": round(mb / seconds, 1),
        "ok": result["ok"],
        **env,
    }
    print(json.dumps(line), flush=True)


def _ratio(name: str, value: float, reference: float, target: float | None) -> None:
    ratio = value / reference
    line: dict[str, Any] = {"ratio": name, "value": round(ratio, 3)}
    if target is not None:
        line |= {"target": target, "met": ratio >= target}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
