"""Conversion throughput: the single-process converter against grain.convert's executors.

Usage: uv run python benchmarks/convert.py [--records 60000] [--shards 16] [--workers 2]
       [--work 60] [--no-ray]

One run, one corpus (JSON lines, `--records` records of about 100 bytes, in 4
files), one CPU-bound transform (pure Python work over each record's text,
`--work` rounds; it holds the GIL, so threads would not help), three ways:

- ``single_process``: what ``grain convert`` did before it had a plan: read
  every line, json.loads, the transform, pickle, and
  `grain_sources.write_array_record` into contiguous shards, in one process;
- ``local_workers_K``: ``grain.convert.convert(executor="local", workers=K)``;
- ``ray_K_cpus``: ``executor="ray"`` on a local Ray cluster of K CPUs started
  before the clock (its start-up is the separate ``ray_startup`` line: ray.init
  and the first task's round trip).

Each line: records/s and MB/s (of the records read: the JSON lines' bytes),
the wall time and, for the executors, the speedup over ``single_process``.
``ok`` says that the executors wrote the same bytes and the records read back
equal the single process's. JSON lines on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import tempfile
import time

from _bench_common import json_stdout

import grain
from grain.convert import convert
from grain_sources import write_array_record

RAY_ENV = {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled"}


def cpu_bound(row: dict, rounds: int = 60) -> dict:
    """Pure Python work over the record's text (a stand-in for tokenizing)."""
    text = row["text"]
    value = 0
    for round_ in range(rounds):
        for char in text:
            value = (value * 31 + ord(char) + round_) & 0xFFFFFFFF
    return {"id": row["id"], "text": text, "hash": value}


class _Work:
    """The transform with its number of rounds (picklable, by reference to this module)."""

    def __init__(self, rounds: int):
        self.rounds = rounds

    def __call__(self, row: dict) -> dict:
        return cpu_bound(row, self.rounds)


def _corpus(directory: str, records: int) -> int:
    os.makedirs(directory)
    per_file = -(-records // 4)
    size = 0
    for number in range(4):
        with open(os.path.join(directory, f"part-{number}.jsonl"), "w") as file:
            for i in range(number * per_file, min(records, (number + 1) * per_file)):
                line = json.dumps({"id": i, "text": f"document {i} " + "lorem ipsum " * 6})
                file.write(line + "\n")
                size += len(line) + 1
    return size


def _single_process(src: str, dest: str, shards: int, work: _Work) -> None:
    def records():
        for name in sorted(os.listdir(src)):
            with open(os.path.join(src, name), "rb") as file:
                for line in file:
                    yield work(json.loads(line))

    class Sized:  # a length, so that shards are contiguous, as the plan cuts them
        def __len__(self) -> int:
            return sum(1 for name in os.listdir(src) for _ in open(os.path.join(src, name), "rb"))

        def __iter__(self):
            return records()

    os.makedirs(os.path.dirname(dest))
    write_array_record(Sized(), dest, num_shards=shards, serializer="pickle", progress=False)


def _files(paths: list[str]) -> list[bytes]:
    out = []
    for path in paths:
        with open(path, "rb") as file:
            out.append(file.read())
    return out


def _records(pattern: str) -> list[bytes]:
    with grain.sources.ArrayRecordDataSource(pattern) as source:
        return [source[i] for i in range(len(source))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=int, default=60, help="rounds of the transform")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray cases")
    args = parser.parse_args()
    out = json_stdout()
    root = tempfile.mkdtemp(prefix="grain-convert-bench-")
    try:
        src = os.path.join(root, "in")
        size = _corpus(src, args.records)
        work = _Work(args.work)
        common = {"benchmark": "convert", "records": args.records, "shards": args.shards}

        def emit(case: str, seconds: float, **extra: object) -> None:
            line = {
                **common,
                "case": case,
                "seconds": round(seconds, 3),
                "records_per_s": args.records / seconds,
                "mb_per_s": size / 1e6 / seconds,
                "load_avg_1min": os.getloadavg()[0],  # the 2-core VM is shared
                **extra,
            }
            print(json.dumps(line), file=out, flush=True)
            print(f"convert: {case}: {seconds:.2f} s", file=sys.stderr)

        start = time.perf_counter()
        _single_process(src, os.path.join(root, "single/x"), args.shards, work)
        single_s = time.perf_counter() - start
        single_pattern = os.path.join(root, "single/x") + f"@{args.shards}"
        single = [pickle.loads(r) for r in _records(single_pattern)]
        emit("single_process", single_s, ok=len(single) == args.records)

        start = time.perf_counter()
        local = convert(
            src, os.path.join(root, "local/x"), num_shards=args.shards, workers=args.workers,
            transform=work,
        )  # fmt: skip
        local_s = time.perf_counter() - start
        local_ok = [pickle.loads(r) for r in _records(local.pattern)] == single
        emit(
            f"local_workers_{args.workers}",
            local_s,
            speedup_vs_single=single_s / local_s,
            ok=local_ok,
        )
        if args.no_ray:
            return
        os.environ.update(RAY_ENV)  # before Ray is imported: it reads them once
        import ray

        start = time.perf_counter()
        ray.init(address="local", num_cpus=args.workers, include_dashboard=False,
                 log_to_driver=False)  # fmt: skip
        ray.get(ray.remote(lambda: None).remote())
        startup_s = time.perf_counter() - start
        print(json.dumps({**common, "case": "ray_startup", "seconds": round(startup_s, 3),
                          "ok": True}), file=out, flush=True)  # fmt: skip
        try:
            start = time.perf_counter()
            on_ray = convert(
                src, os.path.join(root, "ray/x"), num_shards=args.shards, executor="ray",
                transform=work,
            )  # fmt: skip
            ray_s = time.perf_counter() - start
        finally:
            ray.shutdown()
        emit(
            f"ray_{args.workers}_cpus",
            ray_s,
            speedup_vs_single=single_s / ray_s,
            with_startup_speedup=single_s / (ray_s + startup_s),
            ok=_files(on_ray.shards) == _files(local.shards),
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
